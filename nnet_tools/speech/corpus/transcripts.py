"""Kaldi ``text`` files: 'utt word1 word2 ...' per line; their words against a lang dir's."""
import collections
import os

from nnet_tools.data.textfile import printable, records, table_file
from nnet_tools.errors import NnetError


def read_text(specifier):
    """{utt: [words]} of a text table ('data/test/text', 'ark:data/test/text', or stdin as '-' or
    'ark:-'); an utterance may have no words (an empty transcript)."""
    path = table_file(specifier, "text")
    out = {}
    for n, fields, _ in records(path):
        if fields[0] in out:
            raise NnetError(f"{printable(path)}:{n}: utterance '{fields[0]}' appears twice")
        out[fields[0]] = fields[1:]
    return out


def read_symbols(lang_dir):
    """(the words of lang_dir/words.txt, the OOV word of lang_dir/oov.txt or None: a graph dir
    has words.txt only)."""
    words_txt, oov_txt = os.path.join(lang_dir, "words.txt"), os.path.join(lang_dir, "oov.txt")
    words = {fields[0] for _, fields, _ in records(words_txt)}
    oov = None
    if os.path.exists(oov_txt):
        found = [fields for _, fields, _ in records(oov_txt)]
        if len(found) != 1 or len(found[0]) != 1 or found[0][0] not in words:
            raise NnetError(f"{oov_txt}: expected one word of {words_txt}")
        oov = found[0][0]
    return words, oov


def oov_counts(refs, words, where, words_txt):
    """Counter of the transcript words not in ``words`` (Kaldi's sym2int.pl --map-oov maps them).
    A word that is in ``words`` only in another case ('ONE' for 'one') is an error: Kaldi matches
    words exactly, so such a text is in the wrong case, and mapping all of it to the OOV word
    would train on nothing."""
    counts, first = collections.Counter(), {}
    for utt, utt_words in refs.items():
        for w in utt_words:
            if w not in words:
                counts[w] += 1
                first.setdefault(w, utt)
    lower = {w.lower(): w for w in words}
    cased = [w for w in counts if w.lower() in lower]
    if cased:
        w, known = cased[0], lower[cased[0].lower()]
        fn = "tolower" if known == known.lower() else "toupper"
        raise NnetError(f"{where}: utt '{first[w]}': word '{w}' is not in {words_txt}, but '{known}' is "
                        f"({sum(counts[c] for c in cased)} words of the text are there only in another case): "
                        f"Kaldi matches words exactly; put the text in the lexicon's case, keeping the "
                        f"utterance-ids, e.g. awk '{{for (i = 2; i <= NF; i++) $i = {fn}($i)}} 1'")
    return counts


def oov_summary(counts, where, words_txt, oov=None):
    """One line on a Counter of OOV words, e.g. "data/train/text: 3 words not in data/lang/words.txt
    (eleven 2, twelve 1): mapped to '!SIL' (its oov.txt), ..."."""
    most = ", ".join(f"{w} {n}" for w, n in counts.most_common(5)) + (", ..." if len(counts) > 5 else "")
    what = (f"mapped to '{oov}' (its oov.txt), as Kaldi's sym2int.pl --map-oov maps them" if oov else
            "the decoder cannot output them: each counts as an error in scoring")
    n = sum(counts.values())
    return f"{where}: {n} word{'s' if n != 1 else ''} not in {words_txt} ({most}): {what}"


def check_words(refs, lang_dir, where):
    """The OOV summary of refs against lang_dir (a lang or graph dir), as a list of 0 or 1
    lines; an error for words in the wrong case (see oov_counts)."""
    return [line] if (line := map_oovs(refs, lang_dir, where)[1]) else []


def map_oovs(refs, lang_dir, where):
    """(refs with every word not in lang_dir/words.txt replaced by its oov.txt word, as Kaldi's
    sym2int.pl --map-oov does before alignment, and the OOV summary line or None). Without an
    oov.txt, refs come back as they are."""
    words, oov = read_symbols(lang_dir)
    words_txt = os.path.join(lang_dir, "words.txt")
    counts = oov_counts(refs, words, where, words_txt)
    if not counts:
        return refs, None
    if oov is not None:
        refs = {utt: [w if w in words else oov for w in ws] for utt, ws in refs.items()}
    return refs, oov_summary(counts, where, words_txt, oov)
