"""Word n-gram LMs: trained as ARPA files (kaldingram: SRILM's unmodified back-off Kneser-Ney,
``ngram-count -ukndiscount -kn-modify-counts-at-end``), checked, scored (perplexity), and turned
into G.fst (kaldilm: Kaldi's arpa2fst) in a copy of a lang dir, as utils/format_lm.sh does.

The unknown word: the LM's vocabulary is the training text's. With ``unk`` (the lang dir's OOV
word, e.g. <UNK>, pronounced SPN) the unigram distribution also gives that word the Good-Turing
estimate of the probability of a word never seen in training (the share of training tokens
whose word was seen once), as a Kneser-Ney modified count, so the discounts and back-off weights
stay normalised. Lexicon words the training text lacks are not in the LM, so G cannot output
them: the unknown word stands in for them. Perplexity scores words the LM lacks as the unknown
word (kaldingram's ppl with that word as its unk), and counts them as OOVs.

Import order (one process): kaldi_hmm_gmm, then kaldifst, then kaldilm; kaldilm before kaldifst
hangs, as kaldifst before kaldi_hmm_gmm does (see nnet_tools/speech/__init__.py), and so does
loading vosk after kaldilm: keep kaldilm out of processes that decode with vosk.
"""
import collections
import contextlib
import io
import math
import os
import re
import shutil

from nnet_tools.cpp_stderr import stderr_captured
from nnet_tools.data.textfile import read_text
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, copy_file, output_dir, write_error, write_text

BOS, EOS = "<s>", "</s>"
# utils/format_lm.sh copies these of the lang dir, then adds G.fst.
LANG_FILES = ("phones.txt", "words.txt", "topo", "L.fst", "L_disambig.fst", "oov.int", "oov.txt")


@contextlib.contextmanager
def _quiet():
    """kaldingram draws tqdm progress bars on stderr: not in a Kaldi log."""
    with contextlib.redirect_stderr(io.StringIO()):
        yield


def _import_kaldilm():
    try:
        import kaldi_hmm_gmm  # noqa: F401  (first of the three, see the module's docstring)
    except ImportError:
        pass
    import kaldifst  # noqa: F401  (before kaldilm)
    import kaldilm
    return kaldilm


# --- training -------------------------------------------------------------------------------------

def train(sentences, order=3, unk=None):
    """ARPA text of an ``order``-gram LM on ``sentences`` (lists of words), and the figures
    {'ngrams': {order: count}, 'unk_prob': p or None}."""
    from kaldingram.train import NgramCounts
    if not 1 <= order <= 5:
        raise NnetError(f"--order must be in 1..5 (kaldingram's), got {order}")
    sentences = [s for s in sentences if s]
    if not sentences:
        raise NnetError("no words to train an LM on")
    reserved = [w for s in sentences for w in s if w in (BOS, EOS) or w.startswith("#") or w == "<eps>"]
    if reserved:
        raise NnetError(f"the training text has the reserved symbol '{reserved[0]}' as a word")
    counts = NgramCounts(order)
    with _quiet():
        for s in sentences:
            counts.add_raw_counts_from_line(" ".join(s))
        unk_prob = _add_unk(counts, sentences, unk) if unk is not None else None
        counts.cal_discounting_constants()
        counts.cal_f()
        counts.cal_bow()
        out = io.StringIO()
        counts.print_as_arpa(fout=out)
    text = out.getvalue()
    return text, {"ngrams": dict(_header_counts(text)), "unk_prob": unk_prob}


def _add_unk(counts, sentences, unk):
    """Give ``unk`` the Good-Turing probability of an unseen word, N1/N, as a unigram modified
    count c with c / (n(**) + c) = N1/N; nothing when the text has the word already."""
    tokens = collections.Counter(w for s in sentences for w in s)
    if unk in tokens:
        return None
    n1, n = sum(1 for c in tokens.values() if c == 1), sum(tokens.values())
    p = max(n1, 1) / n
    unigrams = counts.counts[0][()]
    if counts.ngram_order == 1:   # plain counts: c / (N + c) = p
        total = unigrams.total_count
    else:
        total = sum(len(unigrams.word_to_context[w]) for w in unigrams.word_to_count)
    c = max(1, round(p * total / (1.0 - p)))
    contexts = {f"<unk-context-{k}>" for k in range(c)} if counts.ngram_order > 1 else set()
    unigrams.add_count(unk, None, c)
    unigrams.word_to_context[unk] |= contexts
    return c / (total + c)


def _header_counts(text):
    for line in text.splitlines():
        if line.startswith("ngram ") and "=" in line:
            k, _, v = line[6:].partition("=")
            yield int(k), int(v)


def write_arpa(text, path):
    write_text(path, text)


# --- checking ---------------------------------------------------------------------------------------

# A number as Kaldi's ConvertStringToReal reads one (no inf, nan or 1_000): -99 is SRILM's log10(0).
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _real(text):
    return float(text) if _NUMBER.match(text) and math.isfinite(float(text)) else None


def check_arpa(path):
    """Parse an ARPA file as Kaldi's ArpaFileParser does, stricter where it only warns: raise
    NnetError naming the file, the line and what is wrong. Returns ({order: count}, {word: ngrams})."""
    lines = read_text(path, "ARPA LM").splitlines()
    n, counts, words, unigrams = 0, {}, collections.Counter(), set()

    def where(k):
        return f"{path}:{k}: [{lines[k - 1].strip()[:80]}]"
    while n < len(lines) and lines[n].strip() != "\\data\\":
        n += 1
    if n == len(lines):
        raise NnetError(f"{path}: not an ARPA LM: no \\data\\ line")
    n += 1
    while n < len(lines) and not lines[n].strip().startswith("\\"):
        line = lines[n].strip()
        n += 1
        if not line:
            continue
        fields = line.replace("=", " = ").split()
        if len(fields) != 4 or fields[0] != "ngram" or fields[2] != "=" or not fields[1].isdigit() \
                or not fields[3].isdigit():
            raise NnetError(f"{where(n)}: expected 'ngram N=COUNT' in the \\data\\ section")
        if int(fields[1]) != len(counts) + 1:
            raise NnetError(f"{where(n)}: expected the count of the {len(counts) + 1}-grams next")
        counts[int(fields[1])] = int(fields[3])
    if not counts:
        raise NnetError(f"{path}:{n}: the \\data\\ section is missing or empty")
    top = len(counts)
    for order in range(1, top + 1):
        if n >= len(lines) or lines[n].strip() != f"\\{order}-grams:":
            raise NnetError(f"{where(n + 1) if n < len(lines) else f'{path}:{n}: end of file'}: "
                            f"expected '\\{order}-grams:'")
        n += 1
        seen = 0
        while n < len(lines) and not lines[n].strip().startswith("\\"):
            line = lines[n]
            n += 1
            fields = line.split()
            if not fields:
                continue
            seen += 1
            if seen > counts[order]:
                raise NnetError(f"{where(n)}: the header says {counts[order]} {order}-grams, this is one more")
            if not order + 1 <= len(fields) <= order + 2 or (order == top and len(fields) != order + 1):
                raise NnetError(f"{where(n)}: expected 'logprob w1 .. w{order}"
                                f"{'' if order == top else ' [backoff]'}' ({order + 1}"
                                f"{'' if order == top else f' or {order + 2}'} fields), got {len(fields)}")
            if _real(fields[0]) is None:
                raise NnetError(f"{where(n)}: invalid n-gram logprob '{fields[0]}'")
            if len(fields) == order + 2 and _real(fields[-1]) is None:
                raise NnetError(f"{where(n)}: invalid backoff weight '{fields[-1]}'")
            for w in fields[1:order + 1]:
                if w == "<eps>" or w.startswith("#"):
                    raise NnetError(f"{where(n)}: '{w}' is a reserved symbol, not a word")
                words[w] += 1
            if order == 1:
                unigrams.add(fields[1])
        if seen < counts[order]:
            raise NnetError(f"{path}:{n}: the header says {counts[order]} {order}-grams, the section has {seen}")
    while n < len(lines) and not lines[n].strip():
        n += 1
    if n >= len(lines) or lines[n].strip() != "\\end\\":
        raise NnetError(f"{where(n + 1) if n < len(lines) else f'{path}:{n}: end of file'}: expected '\\end\\'")
    if BOS not in unigrams:   # arpa2fst: "Arpa file did not contain the beginning-of-sentence symbol"
        raise NnetError(f"{path}: no 1-gram '{BOS}': an LM for sentences has <s> and </s>")
    return counts, words


# --- perplexity -------------------------------------------------------------------------------------

def perplexity(arpa_path, sentences, unk=None):
    """kaldingram's (SRILM's) figures of the LM on ``sentences``: {'logprob', 'num_sentences',
    'num_words', 'num_oov', 'num_zeroprobs', 'ppl', 'ppl1'}. Words the LM lacks score as ``unk``
    when the LM has it; otherwise their sentences are zeroprobs, left out of ppl."""
    from kaldingram.ppl import compute_ppl
    from kaldingram.prune import ArpaParser
    check_arpa(arpa_path)
    with _quiet():
        lm = ArpaParser().loadf(arpa_path, encoding="utf-8")[0]
        lm._unk = unk if unk is not None and lm.contains_word(unk) else None   # kaldingram's own is '<unk>'
        return compute_ppl(lm, [" ".join(s) for s in sentences if s])


# --- G.fst ------------------------------------------------------------------------------------------

def arpa_to_fst(arpa_path, words_txt, fst_path):
    """G.fst from an ARPA file with the words of ``words_txt`` (Kaldi's arpa2fst
    --disambig-symbol=#0 --read-symbol-table=words.txt: <s> and </s> become epsilons, #0 is on
    the back-off arcs). Returns (G as a kaldifst FST, the warning line or None): n-grams of words
    not in words.txt are skipped, as arpa2fst skips them."""
    from nnet_tools.speech.lang.fstio import read_fst
    from nnet_tools.speech.lang.langdir import read_symbols
    counts, words = check_arpa(arpa_path)
    table = read_symbols(words_txt)
    for symbol in (BOS, EOS, "#0"):
        if symbol not in table:
            raise NnetError(f"{words_txt}: no '{symbol}' (a lang dir's words.txt has #0, <s> and </s>)")
    missing = sorted(w for w in words if w not in table)
    warning = None
    if missing:
        warning = (f"{arpa_path}: {len(missing)} word{'s' if len(missing) > 1 else ''} not in {words_txt} "
                   f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): their "
                   f"{sum(words[w] for w in missing)} n-grams are skipped, as arpa2fst skips them")
    kaldilm = _import_kaldilm()
    said = []
    with atomic_path(fst_path) as tmp:
        try:
            with stderr_captured(said):
                kaldilm.arpa2fst(input_arpa=arpa_path, output_fst=tmp, disambig_symbol="#0",
                                 read_symbol_table=words_txt, max_arpa_warnings=0)
        except Exception as e:
            errors = [line for line in "".join(said).splitlines() if line.startswith("[E]")]
            reason = errors[-1][3:].strip() if errors else (str(e).strip().splitlines() or ["arpa2fst failed"])[-1]
            raise NnetError(f"{arpa_path}: arpa2fst: {reason}") from None
        g = read_fst(tmp)
    return g, warning


def fst_size(fst):
    import kaldifst
    return fst.num_states, sum(sum(1 for _ in kaldifst.ArcIterator(fst, s)) for s in range(fst.num_states))


def format_lm(lang_dir, arpa_path, out_dir):
    """utils/format_lm.sh: ``out_dir`` = lang_dir's files (phones.txt, words.txt, topo, L.fst,
    L_disambig.fst, phones/, oov.*) + G.fst from the ARPA. Returns (G, warning line or None)."""
    for name in LANG_FILES + ("phones",):
        if not os.path.exists(os.path.join(lang_dir, name)):
            raise NnetError(f"{os.path.join(lang_dir, name)}: no such file (is {lang_dir} a lang dir?)")
    same = os.path.abspath(lang_dir) == os.path.abspath(out_dir)
    with output_dir(out_dir):   # an out_dir this run made goes again if it fails
        # G first: a bad ARPA leaves an existing out_dir as it was.
        g, warning = arpa_to_fst(arpa_path, os.path.join(lang_dir, "words.txt"), os.path.join(out_dir, "G.fst"))
        if not same:
            for name in LANG_FILES:
                copy_file(os.path.join(lang_dir, name), os.path.join(out_dir, name))
            phones = os.path.join(out_dir, "phones")
            if os.path.isdir(phones):
                shutil.rmtree(phones)
            try:
                shutil.copytree(os.path.join(lang_dir, "phones"), phones)
            except OSError as e:
                raise write_error(phones, e) from None
    return g, warning
