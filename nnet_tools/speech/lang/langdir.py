"""The lang directory (Kaldi's utils/prepare_lang.sh): symbol tables, HMM topology, L.fst, G.fst.

Input: a Kaldi dict dir (dictdir.py), or a bare lexicon.txt standing for one (one silence phone,
every other phone its own base phone). Layout as Kaldi's: phones.txt, words.txt, topo, L.fst
(lexicon with optional silence), L_disambig.fst (with the #0 self-loops of fstaddselfloops, so a
backoff G composes), G.fst (a word loop, when asked), oov.{txt,int}, and phones/: the sets
silence, nonsilence, optional_silence, disambig and context_indep (.txt, .int, .csl), sets, roots
and extra_questions (.txt, .int), wdisambig (.txt, _phones.int, _words.int), align_lexicon
(.txt, .int), and with word-position-dependent phones (positions.py, Kaldi's default) also
word_boundary (.txt, .int) and the position questions in extra_questions.
"""
import os

from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import make_dirs, write_error, write_text
from nnet_tools.speech.lang import dictdir, positions
from nnet_tools.speech.lang.fstio import write_fst
from nnet_tools.speech.lang.grammar import word_loop_fst
from nnet_tools.speech.lang.lexicon import add_lex_disambig, lexicon_fst, read_lexicon


class Lang:
    """Symbol tables and sets of a lang dir, as ints; what prepare_lang writes besides (the phone
    sets by name, the lexicon with the phones of phones.txt) when it was built, not loaded."""

    def __init__(self, phones, words, silence, disambig, optional_silence=None):
        self.phones = phones        # name -> id
        self.words = words          # name -> id
        self.silence = silence      # [phone ids]
        self.disambig = disambig    # [phone ids of #0, #1, ...]
        self.optional_silence = silence[0] if optional_silence is None and silence else optional_silence
        self.sets = self.extra_questions = self.lexicon = self.word_boundary = None

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


def build(lexicon, silence_phone="SIL", silence_word="!SIL", position_dependent=False):
    """Lang for a bare ``lexicon`` ([(word, phones)]): Kaldi's numbering, silence phones first."""
    return build_dict(dictdir.of_lexicon(lexicon, silence_phone, silence_word), position_dependent)


def build_dict(d, position_dependent=True):
    """Lang for a DictDir, numbered as prepare_lang.sh numbers it: <eps>, the silence phones, the
    non-silence phones (each base phone's variants together, in the dict's order), #0, #1, ..."""
    if position_dependent:
        d.validate()  # no phone may already end in a position suffix
    mapping = positions.phone_map(d.silence, d.nonsilence, position_dependent)
    silence = [p for line in positions.apply_map(mapping, d.silence) for p in line]
    nonsilence = [p for line in positions.apply_map(mapping, d.nonsilence) for p in line]
    lexicon = positions.mark_lexicon(d.lexicon) if position_dependent else [(w, list(p)) for w, p in d.lexicon]
    # #0 (G's backoff), the lexicon's #1.. and one more: L_disambig's after optional silence.
    _, top = add_lex_disambig(lexicon)
    disambig = [f"#{k}" for k in range(top + 2)]
    phones = {p: i for i, p in enumerate(["<eps>"] + silence + nonsilence + disambig)}
    words = set(w for w, _ in d.lexicon)
    for reserved in ("<s>", "</s>"):
        if reserved in words:
            raise NnetError(f"{d.file('lexicon.txt')}: {reserved} is in the vocabulary")
    word_names = ["<eps>"] + sorted(words) + ["#0", "<s>", "</s>"]
    lang = Lang(phones, {w: i for i, w in enumerate(word_names)}, [phones[p] for p in silence],
                [phones[p] for p in disambig], phones[d.optional_silence])
    lang.sets = positions.apply_map(mapping, d.silence + d.nonsilence)
    lang.extra_questions = positions.apply_map(mapping, d.extra_questions) + \
        (positions.questions(d.silence, d.nonsilence) if position_dependent else [])
    lang.lexicon = lexicon
    lang.word_boundary = positions.word_boundary(silence + nonsilence) if position_dependent else None
    return lang


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


def prepare(lexicon_path, lang_dir, sil_prob=0.5, silence_phone="SIL", word_loop=True, oov=None,
            position_dependent=False):
    """Write the whole lang dir from a bare lexicon.txt; returns the Lang. ``oov``: the word OOVs
    map to (prepare_lang.sh's <oov-dict-entry>), by default the first word pronounced as the
    silence phone alone (Kaldi's yesno recipe passes its silence word). Everything is checked and
    built before the first file is written."""
    lexicon = read_lexicon(lexicon_path)
    d = dictdir.of_lexicon(lexicon, silence_phone, path=lexicon_path)
    if oov is None:
        oov = next((w for w, phones in lexicon if phones == [silence_phone]), None)
        if oov is None:
            raise NnetError(f"{lexicon_path}: no word is pronounced '{silence_phone}' alone: give --oov")
    if oov not in {w for w, _ in lexicon}:
        raise NnetError(f"{lexicon_path}: --oov word '{oov}' is not in the lexicon")
    return _write(build_dict(d, position_dependent), lang_dir, sil_prob, d.optional_silence, word_loop, oov)


def prepare_dict(dict_dir, oov, lang_dir, tmp_dir=None, sil_prob=0.5, position_dependent=True, word_loop=False):
    """Write the whole lang dir from a Kaldi dict dir, as prepare_lang.sh <dict-src-dir>
    <oov-dict-entry> <tmp-dir> <lang-dir>; ``tmp_dir`` (optional) gets its intermediate files
    lexiconp.txt, lexiconp_disambig.txt, phone_map.txt and lex_ndisambig. Returns the Lang."""
    d = dictdir.read(dict_dir)
    if oov not in {w for w, _ in d.lexicon}:
        raise NnetError(f"{d.file('lexicon.txt')}: the OOV word '{oov}' is not in the lexicon "
                        f"(Kaldi's recipes add e.g. '<UNK> SPN' with SPN a silence phone)")
    lang = build_dict(d, position_dependent)
    lang = _write(lang, lang_dir, sil_prob, d.optional_silence, word_loop, oov)
    if tmp_dir is not None:
        try:
            make_dirs(tmp_dir)
        except OSError as e:
            raise write_error(tmp_dir, e) from None
        mapping = positions.phone_map(d.silence, d.nonsilence, position_dependent)
        disambig, top = add_lex_disambig(lang.lexicon)
        write_text(os.path.join(tmp_dir, "lexiconp.txt"), "".join(f"{w} 1.0\t{' '.join(p)}\n" for w, p in lang.lexicon))
        write_text(os.path.join(tmp_dir, "lexiconp_disambig.txt"),
                   "".join(f"{w} 1.0\t{' '.join(p)}\n" for w, p in disambig))
        write_text(os.path.join(tmp_dir, "phone_map.txt"),
                   "".join(f"{p} {' '.join(v)}\n" for p, v in mapping.items()))
        write_text(os.path.join(tmp_dir, "lex_ndisambig"), f"{top + 1}\n")
    return lang


def _write(lang, lang_dir, sil_prob, optional_silence, word_loop, oov):
    import kaldifst
    disambig_lexicon, _ = add_lex_disambig(lang.lexicon)
    l_disambig = lexicon_fst(lang, disambig_lexicon, sil_prob, optional_silence, lang.disambig[-1])
    # fstaddselfloops wdisambig_phones.int wdisambig_words.int: G's #0 passes through L.
    kaldifst.add_self_loops(l_disambig, [lang.phones["#0"]], [lang.words["#0"]])
    kaldifst.arcsort(l_disambig, sort_type="olabel")
    fsts = {"L.fst": lexicon_fst(lang, lang.lexicon, sil_prob, optional_silence), "L_disambig.fst": l_disambig}
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
    if lang.word_boundary is None:  # prepare_lang.sh starts with rm -r phones/: a stale one would mislead
        for ext in ("txt", "int"):
            stale = os.path.join(lang_dir, "phones", f"word_boundary.{ext}")
            if os.path.exists(stale):
                os.remove(stale)
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

    def rows(table, prefix="", by_name=True):
        return "".join(prefix + " ".join(p if by_name else str(lang.phones[p]) for p in row) + "\n" for row in table)
    sets = {"silence": lang.silence, "nonsilence": lang.nonsilence, "optional_silence": [lang.optional_silence],
            "disambig": lang.disambig, "context_indep": lang.silence}
    files = {}
    for set_name, ids in sets.items():
        files[f"{set_name}.txt"], files[f"{set_name}.int"] = lines(ids), lines(ids, by_name=False)
        files[f"{set_name}.csl"] = ":".join(map(str, ids)) + "\n"
    # One tree root per base phone (its variants all on it), each with its own pdfs: the silence
    # phones too (--share-silence-phones false).
    files["sets.txt"], files["sets.int"] = rows(lang.sets), rows(lang.sets, by_name=False)
    files["roots.txt"], files["roots.int"] = rows(lang.sets, "shared split "), rows(lang.sets, "shared split ", False)
    files["extra_questions.txt"] = rows(lang.extra_questions)
    files["extra_questions.int"] = rows(lang.extra_questions, by_name=False)
    files["wdisambig.txt"] = "#0\n"
    files["wdisambig_phones.int"] = f"{lang.phones['#0']}\n"
    files["wdisambig_words.int"] = f"{lang.words['#0']}\n"
    # align_lexicon: 'word word phones...' for every entry and '<eps> <eps> SIL', as sort | uniq
    # leaves them (byte order of the lines).
    align = sorted({f"{w} {w} {' '.join(p)}" for w, p in lang.lexicon} | {f"<eps> <eps> {name[lang.optional_silence]}"})
    files["align_lexicon.txt"] = "".join(a + "\n" for a in align)
    words = dict(lang.words, **{"<eps>": 0})
    files["align_lexicon.int"] = "".join(" ".join([str(words[f[0]]), str(words[f[1]])] +
                                                  [str(lang.phones[p]) for p in f[2:]]) + "\n"
                                         for f in (a.split() for a in align))
    if lang.word_boundary is not None:
        files["word_boundary.txt"] = "".join(f"{p} {kind}\n" for p, kind in lang.word_boundary)
        files["word_boundary.int"] = "".join(f"{lang.phones[p]} {kind}\n" for p, kind in lang.word_boundary)
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
    optional = os.path.join(lang_dir, "phones", "optional_silence.int")
    return Lang(read_symbols(os.path.join(lang_dir, "phones.txt")),
                read_symbols(os.path.join(lang_dir, "words.txt")),
                _read_ints(os.path.join(lang_dir, "phones", "silence.int")),
                _read_ints(os.path.join(lang_dir, "phones", "disambig.int")),
                (_read_ints(optional) or [None])[0] if os.path.exists(optional) else None)


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
