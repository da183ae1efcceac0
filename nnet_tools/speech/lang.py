"""The lang directory (Kaldi's utils/prepare_lang.sh): symbol tables, HMM topology, L.fst, G.fst.

Layout as Kaldi's: phones.txt, words.txt, topo, L.fst (lexicon with optional silence),
L_disambig.fst, G.fst, oov.{txt,int}, and phones/: the sets silence, nonsilence, optional_silence,
disambig and context_indep (.txt, .int, .csl), sets, roots and extra_questions (.txt, .int),
wdisambig (.txt, _phones.int, _words.int). Phones are not word-position dependent (prepare_lang.sh
--position-dependent-phones false), so extra_questions is empty, as there.
"""
import math
import os

from nnet_tools.data.tables import stderr_captured
from nnet_tools.data.textfile import records
from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import atomic_path, make_dirs, write_error, write_text


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


class Lang:
    """Symbol tables and sets of a lang dir, as ints."""

    def __init__(self, phones, words, silence, disambig):
        self.phones = phones        # name -> id
        self.words = words          # name -> id
        self.silence = silence      # [phone ids]
        self.disambig = disambig    # [phone ids of #0, #1, ...]

    @property
    def nonsilence(self):
        return [i for p, i in self.phones.items()
                if i != 0 and i not in self.silence and i not in self.disambig]

    def word_ids(self, words, where):
        missing = [w for w in words if w not in self.words]
        if missing:
            raise NnetError(f"{where}: word '{missing[0]}' is not in words.txt")
        special = [w for w in words if w.startswith("#") or w in ("<eps>", "<s>", "</s>")]
        if special:  # in words.txt, but no path of L outputs them
            raise NnetError(f"{where}: '{special[0]}' is a reserved symbol, not a word")
        return [self.words[w] for w in words]


def build(lexicon, silence_phone="SIL", silence_word="!SIL"):
    """Lang for ``lexicon`` ([(word, phones)]): Kaldi's numbering, silence phones first."""
    phone_set = {p for _, ps in lexicon for p in ps}
    if silence_phone not in phone_set:
        raise NnetError(f"lexicon has no silence phone '{silence_phone}' (add e.g. '{silence_word} {silence_phone}')")
    if phone_set == {silence_phone}:
        raise NnetError(f"lexicon has no phone but the silence phone '{silence_phone}'")
    # #0 (G's backoff), the lexicon's #1.. and one more: L_disambig's after optional silence.
    _, top = add_lex_disambig(lexicon)
    disambig = [f"#{k}" for k in range(top + 2)]
    names = ["<eps>", silence_phone] + sorted(phone_set - {silence_phone}) + disambig
    phones = {p: i for i, p in enumerate(names)}
    word_names = ["<eps>"] + sorted({w for w, _ in lexicon}) + ["#0", "<s>", "</s>"]
    words = {w: i for i, w in enumerate(word_names)}
    return Lang(phones, words, [phones[silence_phone]], [phones[d] for d in disambig])


def topology_text(lang, num_nonsil_states=3, num_sil_states=5):
    """Kaldi's topo (utils/gen_topo.pl): 3-state left-to-right phones; silence with 5 states,
    the middle ones fully connected, as prepare_lang.sh makes it."""
    nonsil = " ".join(map(str, lang.nonsilence))
    sil = " ".join(map(str, lang.silence))
    lines = ["<Topology>", "<TopologyEntry>", "<ForPhones>", nonsil, "</ForPhones>"]
    for s in range(num_nonsil_states):
        lines.append(f"<State> {s} <PdfClass> {s} <Transition> {s} 0.75 <Transition> {s + 1} 0.25 </State>")
    lines += [f"<State> {num_nonsil_states} </State>", "</TopologyEntry>",
              "<TopologyEntry>", "<ForPhones>", sil, "</ForPhones>"]
    p = 1.0 / (num_sil_states - 1)
    lines.append("<State> 0 <PdfClass> 0 " + " ".join(f"<Transition> {k} {p:g}" for k in range(num_sil_states - 1))
                 + " </State>")
    for s in range(1, num_sil_states - 1):
        lines.append(f"<State> {s} <PdfClass> {s} "
                     + " ".join(f"<Transition> {k} {p:g}" for k in range(1, num_sil_states)) + " </State>")
    last = num_sil_states - 1
    lines += [f"<State> {last} <PdfClass> {last} <Transition> {last} 0.75 <Transition> {num_sil_states} 0.25 </State>",
              f"<State> {num_sil_states} </State>", "</TopologyEntry>", "</Topology>"]
    return "\n".join(lines) + "\n"


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


def word_loop_fst(lang, exclude=("!SIL",)):
    """G: one state looping over every real word with equal probability (a digit-loop grammar)."""
    import kaldifst
    loop_words = [i for w, i in lang.words.items()
                  if i != 0 and not w.startswith("#") and w not in ("<s>", "</s>") and w not in exclude]
    if not loop_words:
        raise NnetError(f"the lexicon has no word for the word-loop grammar but {', '.join(exclude)}")
    cost = math.log(len(loop_words))
    fst = kaldifst.StdVectorFst()
    s = fst.add_state()
    fst.start = s
    fst.set_final(state=s, weight=0.0)
    for i in loop_words:
        fst.add_arc(state=s, arc=kaldifst.StdArc(ilabel=i, olabel=i, weight=cost, nextstate=s))
    kaldifst.arcsort(fst, sort_type="ilabel")
    return fst


def _openfst_says(call, otherwise):
    """Run an OpenFst call that reports failure only by its result and a line on stderr: (result,
    that line without its 'ERROR: ', or ``otherwise``)."""
    said = []
    with stderr_captured(said):
        result = call()
    lines = "".join(said).strip().splitlines()
    return result, lines[0].removeprefix("ERROR: ") if lines else otherwise


def write_fst(fst, path):
    with atomic_path(path) as tmp:
        written, reason = _openfst_says(lambda: fst.write(tmp), "OpenFst's write failed")
        if not written:  # a full disk, mostly: the temp file stays short and must not be renamed
            raise write_error(path, RuntimeError(reason))


def read_fst(path):
    import kaldifst
    if not os.path.isfile(path):
        raise NnetError(f"{path}: FST file does not exist")
    fst, reason = _openfst_says(lambda: kaldifst.StdVectorFst.read(path), "not an OpenFst binary file?")
    if fst is None:
        raise NnetError(f"{path}: cannot read FST ({reason})")
    return fst


def _symbols(table):
    return "".join(f"{s} {i}\n" for s, i in sorted(table.items(), key=lambda kv: kv[1]))


def prepare(lexicon_path, lang_dir, sil_prob=0.5, silence_phone="SIL", word_loop=True, oov=None):
    """Write the whole lang dir from lexicon.txt; returns the Lang. ``oov``: the word OOVs map to
    (prepare_lang.sh's <oov-dict-entry>), by default the first word pronounced as the silence
    phone alone (Kaldi's yesno recipe passes its silence word). Everything is checked and built
    before the first file is written."""
    lexicon = read_lexicon(lexicon_path)
    lang = build(lexicon, silence_phone)
    if oov is None:
        oov = next((w for w, phones in lexicon if phones == [silence_phone]), None)
        if oov is None:
            raise NnetError(f"{lexicon_path}: no word is pronounced '{silence_phone}' alone: give --oov")
    if oov not in {w for w, _ in lexicon}:
        raise NnetError(f"{lexicon_path}: --oov word '{oov}' is not in the lexicon")
    disambig_lexicon, _ = add_lex_disambig(lexicon)
    fsts = {"L.fst": lexicon_fst(lang, lexicon, sil_prob, silence_phone),
            "L_disambig.fst": lexicon_fst(lang, disambig_lexicon, sil_prob, silence_phone, lang.disambig[-1])}
    if word_loop:
        fsts["G.fst"] = word_loop_fst(lang)
    try:
        make_dirs(os.path.join(lang_dir, "phones"))
    except OSError as e:
        raise write_error(os.path.join(lang_dir, "phones"), e) from None
    write_text(os.path.join(lang_dir, "phones.txt"), _symbols(lang.phones))
    write_text(os.path.join(lang_dir, "words.txt"), _symbols(lang.words))
    write_text(os.path.join(lang_dir, "topo"), topology_text(lang))
    for name, text in _phone_sets(lang).items():
        write_text(os.path.join(lang_dir, "phones", name), text)
    write_text(os.path.join(lang_dir, "oov.txt"), f"{oov}\n")
    write_text(os.path.join(lang_dir, "oov.int"), f"{lang.words[oov]}\n")
    for name, fst in fsts.items():
        write_fst(fst, os.path.join(lang_dir, name))
    return lang


def _phone_sets(lang):
    """phones/'s files as prepare_lang.sh writes them, by name."""
    name = {i: p for p, i in lang.phones.items()}

    def lines(ids, prefix="", by_name=True):
        return "".join(f"{prefix}{name[i] if by_name else i}\n" for i in ids)
    sets = {"silence": lang.silence, "nonsilence": lang.nonsilence, "optional_silence": lang.silence[:1],
            "disambig": lang.disambig, "context_indep": lang.silence}
    files = {}
    for set_name, ids in sets.items():
        files[f"{set_name}.txt"], files[f"{set_name}.int"] = lines(ids), lines(ids, by_name=False)
        files[f"{set_name}.csl"] = ":".join(map(str, ids)) + "\n"
    # One tree root per phone, each with its own pdfs (--share-silence-phones false).
    roots = lang.silence + lang.nonsilence
    files["sets.txt"], files["sets.int"] = lines(roots), lines(roots, by_name=False)
    files["roots.txt"], files["roots.int"] = lines(roots, "shared split "), lines(roots, "shared split ", False)
    files["extra_questions.txt"] = files["extra_questions.int"] = ""
    files["wdisambig.txt"] = "#0\n"
    files["wdisambig_phones.int"] = f"{lang.phones['#0']}\n"
    files["wdisambig_words.int"] = f"{lang.words['#0']}\n"
    return files


def _read_table(path):
    table = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                fields = line.split()
                if len(fields) != 2 or not fields[1].isdigit():
                    raise NnetError(f"{path}:{n}: expected 'symbol id', got '{line.strip()}'")
                table[fields[0]] = int(fields[1])
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "symbol table", e) from None
    return table


def _read_ints(path):
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except OSError as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError:
        raise NnetError(f"{path}: expected integers") from None


def load(lang_dir):
    """Lang of an existing lang dir (phones.txt, words.txt, phones/*.int)."""
    return Lang(_read_table(os.path.join(lang_dir, "phones.txt")),
                _read_table(os.path.join(lang_dir, "words.txt")),
                _read_ints(os.path.join(lang_dir, "phones", "silence.int")),
                _read_ints(os.path.join(lang_dir, "phones", "disambig.int")))


def read_topology(lang_dir):
    import kaldi_hmm_gmm as khg
    path = os.path.join(lang_dir, "topo")
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "HMM topology", e) from None
    topo = khg.HmmTopology()
    try:
        topo.read(text)
    except Exception as e:  # Kaldi's parser reports through a generic runtime error
        raise NnetError(f"{path}: bad HMM topology: {str(e).strip().splitlines()[-1]}") from None
    return topo, text
