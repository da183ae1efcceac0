"""The lexicon: lexicon.txt, disambiguation symbols (add_lex_disambig.pl), L.fst (make_lexicon_fst.py)."""
import math

from nnet_tools.data.textfile import records
from nnet_tools.errors import NnetError


def read_lexicon(path):
    """[(word, [phones])] from lexicon.txt lines 'word phone1 phone2 ...', in file order. A line
    given twice, and lexiconp.txt's 'word prob phone1 ...', are refused (validate_dict_dir.pl
    refuses the first; the second would make phones of the probabilities)."""
    out, seen = [], {}
    for n, fields, _ in records(path):
        if len(fields) < 2:
            raise NnetError(f"{path}:{n}: word '{fields[0]}' has no pronunciation")
        if fields[0].startswith("#") or fields[0] in ("<eps>", "<s>", "</s>"):
            raise NnetError(f"{path}:{n}: '{fields[0]}' is a reserved symbol")
        reserved = [p for p in fields[1:] if p.startswith("#") or p == "<eps>"]
        if reserved:  # these name epsilon and the disambiguation symbols in phones.txt
            raise NnetError(f"{path}:{n}: phone '{reserved[0]}' is a reserved symbol")
        if _is_number(fields[1]) and len(fields) > 2:
            raise NnetError(f"{path}:{n}: '{fields[1]}' is a probability, as in lexiconp.txt: give "
                            f"lexicon.txt (word phone1 phone2 ...)")
        if tuple(fields) in seen:
            raise NnetError(f"{path}:{n}: the same line as line {seen[tuple(fields)]}")
        seen[tuple(fields)] = n
        out.append((fields[0], fields[1:]))
    if not out:
        raise NnetError(f"{path}: empty lexicon")
    return out


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def add_lex_disambig(lexicon):
    """Kaldi's add_lex_disambig.pl: #1, #2, ... after a pronunciation that is a homophone or a
    prefix of another, so L can be determinised. Returns (new lexicon, highest #k used)."""
    count, prefixes = {}, set()
    for _, phones in lexicon:
        count[tuple(phones)] = count.get(tuple(phones), 0) + 1
        for k in range(1, len(phones)):
            prefixes.add(tuple(phones[:k]))
    last, top, out = {}, 0, []
    for word, phones in lexicon:
        key = tuple(phones)
        if count[key] == 1 and key not in prefixes:
            out.append((word, list(phones)))
            continue
        last[key] = last.get(key, 0) + 1
        top = max(top, last[key])
        out.append((word, list(phones) + [f"#{last[key]}"]))
    return out, top


def lexicon_fst(lang, lexicon, sil_prob=0.5, silence_phone="SIL", sil_disambig=None):
    """L as Kaldi's make_lexicon_fst.py --sil-prob: optional silence at the start and after each
    word (cost -log sil_prob, or -log(1 - sil_prob) for none). Phones in, words out.
    ``sil_disambig`` (L_disambig's, --sil-disambig): a phone id put after the optional silence."""
    import kaldifst
    if not 0.0 < sil_prob < 1.0:
        raise NnetError(f"--sil-prob must be in (0, 1), got {sil_prob}")
    sil_cost, nosil_cost = -math.log(sil_prob), -math.log(1.0 - sil_prob)
    fst = kaldifst.StdVectorFst()
    start, loop, sil = fst.add_state(), fst.add_state(), fst.add_state()
    fst.start = start
    fst.set_final(state=loop, weight=0.0)

    def arc(src, ilabel, olabel, weight, dst):
        fst.add_arc(state=src, arc=kaldifst.StdArc(ilabel=ilabel, olabel=olabel, weight=weight, nextstate=dst))

    arc(start, 0, 0, nosil_cost, loop)
    arc(start, 0, 0, sil_cost, sil)
    if sil_disambig is None:
        arc(sil, lang.phones[silence_phone], 0, 0.0, loop)
    else:
        after_sil = fst.add_state()
        arc(sil, lang.phones[silence_phone], 0, 0.0, after_sil)
        arc(after_sil, sil_disambig, 0, 0.0, loop)
    for word, phones in lexicon:
        src = loop
        for k, p in enumerate(phones[:-1]):
            nxt = fst.add_state()
            arc(src, lang.phones[p], lang.words[word] if k == 0 else 0, 0.0, nxt)
            src = nxt
        out = lang.words[word] if len(phones) == 1 else 0
        arc(src, lang.phones[phones[-1]], out, nosil_cost, loop)
        arc(src, lang.phones[phones[-1]], out, sil_cost, sil)
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst
