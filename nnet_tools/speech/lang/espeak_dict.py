"""A Kaldi dict dir whose pronunciations come from espeak-ng's own rules and dictionary
(``espeak-ng -q -x --sep=' '``: its phoneme mnemonics, one word at a time), so a lexicon exists
for any word list, offline, in the phone set the synthesised corpus was spoken with.

Phones: espeak's mnemonics with the stress marks (' primary, , secondary, % = unstressed)
stripped into the base phone (AH0/AH1/AH2 in a CMUdict recipe are one phone here), the linking
'r-' as 'r', '0' as 'Q' and '3' as '@r' (no phone name is a number), and the mark ';' dropped;
case matters ('T' is the th of "thin", 't' is t).
Silence phones SIL (the optional silence, '!SIL SIL') and SPN (spoken noise, '<UNK> SPN'), as
Kaldi's recipes have them. All words go to one espeak-ng process, one word per line (each ended
by a full stop, so that each comes back on a line of its own: the same phones as a call per word).

In running speech espeak-ng says some words otherwise than alone (weak forms: "a" a#, not eI; "to"
t @; a linking r: "far" f A@ r before a vowel), so a lexicon of isolated words would align the
synthesised corpus with the wrong phones. InContext adds those variants, as Kaldi lexicons list
several pronunciations of a word: the training sentences are said by espeak-ng as whole lines
and split back into words (see InContext).
"""
import collections
import re
import subprocess

from nnet_tools.errors import NnetError
from nnet_tools.speech.corpus.synth import espeak_binary
from nnet_tools.speech.lang.dictdir import DictDir

STRESS = "',%="
_DROP = {";", "_", "_:", "_!", "||", "|", "-"}
# espeak's digit-only names would read as phone ids in a tool that takes either: X-SAMPA's Q for
# the vowel of "lot", @r for the r-coloured schwa of "after".
_RENAME = {"r-": "r", "0": "Q", "3": "@r"}
_PHONE = re.compile(r"^[A-Za-z0-9@:#&]+$")
_NOT_IN_A_WORD = re.compile(r"[\s.,;:!?\"()\[\]{}<>#]")
SILENCE, NOISE = "SIL", "SPN"


def phones_of(mnemonics, word):
    """Base phones of one word's espeak-ng -x --sep=' ' output."""
    out = _base_phones(mnemonics, word)
    if not out:
        raise NnetError(f"word '{word}': espeak-ng gave no phones ('{mnemonics.strip()}')")
    return out


def _base_phones(mnemonics, word):
    out = []
    for token in mnemonics.split():
        token = token.lstrip(STRESS)
        if not token or token in _DROP:
            continue
        token = _RENAME.get(token, token)
        if not _PHONE.match(token):
            raise NnetError(f"word '{word}': espeak-ng gave '{mnemonics.strip()}', with '{token}', "
                            f"which is not a phone")
        out.append(token)
    return out


def _espeak(binary, voice, text):
    run = subprocess.run([binary, "-q", "-x", "--sep= ", "-v", voice], input=text.encode(), capture_output=True)
    if run.returncode != 0:
        said = run.stderr.decode(errors="replace").strip().splitlines()
        raise NnetError(f"espeak-ng -v {voice} failed (exit {run.returncode})" + (f": {said[-1]}" if said else ""))
    return [line for line in run.stdout.decode(errors="replace").splitlines() if line.strip()]


def pronounce(words, voice="en", binary=None):
    """{word: [phones]} from espeak-ng, in one process (or, should its lines not come back one
    per word, one per word)."""
    binary = binary or espeak_binary()
    if binary is None:
        raise NnetError("espeak-ng not found on PATH (Debian/Ubuntu: apt-get install espeak-ng)")
    for w in words:
        if _NOT_IN_A_WORD.search(w):
            raise NnetError(f"word '{w}': espeak-ng cannot be given it as one word (punctuation or a reserved "
                            f"symbol): give its pronunciation with --extra-word")
    lines = _espeak(binary, voice, "".join(f"{w}.\n" for w in words)) if words else []
    if len(lines) != len(words):
        lines = [" ".join(_espeak(binary, voice, f"{w}.\n")) for w in words]
    return {w: phones_of(line, w) for w, line in zip(words, lines)}


def _sayable(word):
    return not _NOT_IN_A_WORD.search(word)


def split_words(line, words):
    """[phones] of each of ``words`` from their sentence's espeak-ng -x --sep=' ' line (phones one
    space apart, words two), or None when the line is not one chunk of phones per word: espeak-ng
    says some pairs as one dictionary entry ('of the' 0 v D @, 'for a' f 3 r- @), whose phones
    are not split here, since any split would be a guess."""
    chunks = re.split(r" {2,}", line.strip())
    if len(chunks) != len(words):
        return None
    phones = [_base_phones(c, w) for c, w in zip(chunks, words)]
    return phones if all(phones) else None


def say_sentences(sentences, voice="en", binary=None):
    """[phones per word, or None (split_words)] for each sentence ([words]), from one espeak-ng
    process: one sentence a line, and espeak-ng reads stdin a line at a time, each line a clause
    of its own with no full stop, as each utterance was synthesised (SSML with no punctuation).
    A sentence with a word espeak-ng cannot be given as a word ('<UNK>', punctuation) is None."""
    binary = binary or espeak_binary()
    if binary is None:
        raise NnetError("espeak-ng not found on PATH (Debian/Ubuntu: apt-get install espeak-ng)")
    sayable = [k for k, s in enumerate(sentences) if s and all(_sayable(w) for w in s)]
    lines = _espeak(binary, voice, "".join(" ".join(sentences[k]) + "\n" for k in sayable)) if sayable else []
    if len(lines) != len(sayable):  # a line that came back as two, or as none: one call each
        lines = [_one_line(_espeak(binary, voice, " ".join(sentences[k]) + "\n")) for k in sayable]
    out = [None] * len(sentences)
    for k, line in zip(sayable, lines):
        out[k] = split_words(line, sentences[k])
    return out


def _one_line(lines):
    return lines[0] if len(lines) == 1 else ""


def read_sentences(path):
    """[[words]] of a Kaldi text file ('utt-id word1 word2 ...'); utterances with no words left out."""
    from nnet_tools.data.textfile import records
    return [fields[1:] for _, fields, _ in records(path) if len(fields) > 1]


MIN_COUNT = 3


class InContext:
    """Pronunciations of the lexicon's words as espeak-ng says them in ``sentences`` ([[words]]):
    count(prons) counts, per word, each pronunciation seen in a sentence that splits into its
    words, and keeps as variants those seen at least ``min_count`` times besides the isolated
    one. A count, not a fraction of the word's uses: espeak-ng's rules are deterministic, so a
    variant seen three times is a real context (the linking r of "for" before a vowel is 4 of
    its 48 uses), while a word seen once or twice in one context is not worth a lexicon line."""

    def __init__(self, sentences, min_count=MIN_COUNT):
        if min_count < 1:
            raise NnetError(f"--min-count must be at least 1, got {min_count}")
        self.sentences, self.min_count = [list(s) for s in sentences if s], min_count
        self.counts, self.isolated, self.variants = {}, {}, {}
        self.used, self.skipped, self.example = 0, 0, None

    def count(self, prons, voice="en", binary=None):
        """{word: [phones, ...]}: the variants of ``prons`` ({word: isolated phones}) to add."""
        self.isolated = {w: list(p) for w, p in prons.items()}
        counts = collections.defaultdict(collections.Counter)
        for words, phones in zip(self.sentences, say_sentences(self.sentences, voice, binary)):
            if phones is None:
                self.skipped += 1
                self.example = self.example or " ".join(words)
                continue
            self.used += 1
            for w, p in zip(words, phones):
                if w in prons:
                    counts[w][tuple(p)] += 1
        self.counts = dict(counts)
        self.variants = {w: [list(p) for p, n in c.most_common() if n >= self.min_count and list(p) != prons[w]]
                         for w, c in counts.items()}
        self.variants = {w: v for w, v in self.variants.items() if v}
        return self.variants

    def summary(self, top=10):
        """Log lines: sentences used and skipped, the words given variants (the most used first)."""
        lines = [f"In context: {self.used} of {len(self.sentences)} sentences split into their words"
                 + (f", {self.skipped} skipped (espeak-ng said them as fewer or more words than they have, "
                    f"e.g. '{self.example}')" if self.skipped else "")
                 + f"; {len(self.variants)} words got {sum(map(len, self.variants.values()))} variants "
                 f"(seen at least {self.min_count} times)"]
        ranked = sorted(self.variants, key=lambda w: (-self.counts[w][tuple(self.variants[w][0])], w))
        for w in ranked[:top]:
            c = self.counts[w]
            lines.append(f"  {w}: " + ", ".join(f"{' '.join(p)} (n={c[tuple(p)]})" for p in self.variants[w])
                         + f", {' '.join(self.isolated[w])} (isolated, n={c[tuple(self.isolated[w])]})")
        if len(ranked) > top:
            lines.append(f"  ... and {len(ranked) - top} more words")
        return lines


def read_words(path):
    """The words of a word list: one a line, or the first field of each line ('word ...');
    blank lines skipped, a word given twice kept once; in file order."""
    from nnet_tools.data.textfile import records
    out = []
    for _, fields, _ in records(path):
        if fields[0] not in out:
            out.append(fields[0])
    if not out:
        raise NnetError(f"{path}: no words")
    return out


def make_dict(words, voice="en", extra=(("!SIL", [SILENCE]), ("<UNK>", [NOISE])), path="dict", context=None):
    """DictDir for ``words`` (pronounced by espeak-ng) and the ``extra`` entries (word, phones),
    whose phones in {SIL, SPN} are silence phones (SIL the optional silence) and others are
    non-silence phones; with ``context`` (an InContext), also the in-context variants of the
    espeak-ng words (not of the extra ones). lexicon.txt sorted by word (byte order, as Kaldi's
    sort), a word's pronunciations on lines of their own."""
    extra = [(w, list(p)) for w, p in extra]
    extra_words = {w for w, _ in extra}
    prons = pronounce([w for w in words if w not in extra_words], voice)
    variants = context.count(prons, voice) if context is not None else {}
    lexicon = sorted(extra + list(prons.items()) + [(w, p) for w, ps in variants.items() for p in ps],
                     key=lambda e: (e[0], e[1]))
    silence = [p for p in (SILENCE, NOISE) if any(p in ps for _, ps in lexicon)] or [SILENCE]
    if SILENCE not in silence:
        silence.insert(0, SILENCE)
    nonsilence = sorted({p for _, ps in lexicon for p in ps} - set(silence))
    return DictDir(lexicon, [[p] for p in silence], [[p] for p in nonsilence], SILENCE, (), path).validate()
