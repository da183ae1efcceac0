"""The lang directory (Kaldi's utils/prepare_lang.sh): symbol tables, HMM topology, L.fst, G.fst.

Layout as Kaldi's: phones.txt, words.txt, topo, L.fst (lexicon with optional silence),
L_disambig.fst, G.fst, oov.{txt,int}, and phones/: the sets silence, nonsilence, optional_silence,
disambig and context_indep (.txt, .int, .csl), sets, roots and extra_questions (.txt, .int),
wdisambig (.txt, _phones.int, _words.int). Phones are not word-position dependent (prepare_lang.sh
--position-dependent-phones false), so extra_questions is empty, as there.
"""
import os

from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import make_dirs, write_error, write_text
from nnet_tools.speech.lang.fstio import write_fst
from nnet_tools.speech.lang.grammar import word_loop_fst
from nnet_tools.speech.lang.lexicon import add_lex_disambig, lexicon_fst, read_lexicon


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


def read_symbols(path):
    """A Kaldi symbol table (words.txt, phones.txt): symbol -> id."""
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
    return Lang(read_symbols(os.path.join(lang_dir, "phones.txt")),
                read_symbols(os.path.join(lang_dir, "words.txt")),
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
