"""A Kaldi dict dir (data/local/dict), the input of utils/prepare_lang.sh, checked as
utils/validate_dict_dir.pl checks it.

Files: lexicon.txt ('word phone1 phone2 ...'), silence_phones.txt and nonsilence_phones.txt (one
base phone per line, or several on a line: the stress or tone variants of one base phone, which
share a tree root), optional_silence.txt (the one phone of L.fst's optional silence),
extra_questions.txt (lists of phones for the tree's questions; may be empty). A lexiconp.txt
('word prob phone1 ...') is read when all its probabilities are 1.0, as prepare_lang.sh writes
it from lexicon.txt; other pronunciation probabilities are not supported here.
"""
import os
import re

from nnet_tools.data.textfile import read_text
from nnet_tools.errors import NnetError
from nnet_tools.fileio import make_dirs, write_error, write_text
from nnet_tools.speech.lang.lexicon import read_lexicon

FILES = ("lexicon.txt", "silence_phones.txt", "nonsilence_phones.txt", "optional_silence.txt", "extra_questions.txt")
# validate_dict_dir.pl: '#...' looks like a disambiguation symbol, '_B' ... are the word-position
# suffixes prepare_lang.sh adds, '<eps>' is epsilon.
_BAD_PHONE = re.compile(r"^#|_[BESI]$|^<eps>$")


class DictDir:
    """The contents of a dict dir: lexicon [(word, [phones])], the phone lines of
    silence_phones.txt and nonsilence_phones.txt ([[phones]]), the optional silence phone and
    the extra questions ([[phones]]). ``path`` names it in messages."""

    def __init__(self, lexicon, silence, nonsilence, optional_silence, extra_questions=(), path="dict"):
        self.lexicon, self.silence, self.nonsilence = lexicon, [list(x) for x in silence], [list(x) for x in nonsilence]
        self.optional_silence, self.path = optional_silence, path
        self.extra_questions = [list(q) for q in extra_questions]

    def file(self, name):
        return os.path.join(self.path, name)

    def validate(self):
        """validate_dict_dir.pl's checks; raise NnetError at the first fault (file, line, what)."""
        seen = {}
        for name, lines in (("silence_phones.txt", self.silence), ("nonsilence_phones.txt", self.nonsilence)):
            if not lines:
                raise NnetError(f"{self.file(name)}: empty: list at least one phone")
            for n, phones in enumerate(lines, 1):
                for p in phones:
                    if _BAD_PHONE.search(p):
                        raise NnetError(f"{self.file(name)}:{n}: phone '{p}' has a disallowed form (a leading '#', "
                                        f"a word-position suffix _B _E _I _S, or <eps>)")
                    if p in seen:
                        other = "this file" if seen[p] == name else seen[p]
                        raise NnetError(f"{self.file(name)}:{n}: phone '{p}' is already in {other}")
                    seen[p] = name
        if self.optional_silence not in [p for line in self.silence for p in line]:
            raise NnetError(f"{self.file('optional_silence.txt')}: phone '{self.optional_silence}' is not in "
                            f"{self.file('silence_phones.txt')}")
        for word, phones in self.lexicon:
            for p in phones:
                if p not in seen:
                    raise NnetError(f"{self.file('lexicon.txt')}: word '{word}': phone '{p}' is not in "
                                    f"{self.file('nonsilence_phones.txt')} or {self.file('silence_phones.txt')}")
        for n, question in enumerate(self.extra_questions, 1):
            for p in question:
                if p not in seen:
                    raise NnetError(f"{self.file('extra_questions.txt')}:{n}: phone '{p}' is not in "
                                    f"{self.file('nonsilence_phones.txt')} or {self.file('silence_phones.txt')}")
        # Variants of one base phone share a tree root: some extra question must tell them apart.
        for phones in self.nonsilence:
            for a in phones:
                for b in phones:
                    if a != b and not any((a in q) != (b in q) for q in self.extra_questions):
                        raise NnetError(f"{self.file('nonsilence_phones.txt')}: phones '{a}' and '{b}' share a tree "
                                        f"root but no line of {self.file('extra_questions.txt')} tells them apart")
        return self

    def write(self, path=None):
        """Write the five files (atomically each) into ``path`` (default: self.path)."""
        path = path or self.path
        try:
            make_dirs(path)
        except OSError as e:
            raise write_error(path, e) from None

        def lines(rows):
            return "".join(" ".join(r) + "\n" for r in rows)
        write_text(os.path.join(path, "lexicon.txt"), lines([w] + p for w, p in self.lexicon))
        write_text(os.path.join(path, "silence_phones.txt"), lines(self.silence))
        write_text(os.path.join(path, "nonsilence_phones.txt"), lines(self.nonsilence))
        write_text(os.path.join(path, "optional_silence.txt"), f"{self.optional_silence}\n")
        write_text(os.path.join(path, "extra_questions.txt"), lines(self.extra_questions))


def _phone_lines(path, required=True):
    """[[phones]] of a phone-list file, one list a line; a blank line is an error (Kaldi's too)."""
    if not os.path.exists(path):
        if required:
            raise NnetError(f"{path}: no such file (a dict dir has {', '.join(FILES)})")
        return []
    out = []
    for n, line in enumerate(read_text(path, "phone list").splitlines(), 1):
        if not line.split():
            raise NnetError(f"{path}:{n}: empty line")
        out.append(line.split())
    return out


def _lexiconp(path):
    """lexiconp.txt as a lexicon, when every probability is 1.0 (prepare_lang.sh's own copy)."""
    out = []
    for n, line in enumerate(read_text(path, "lexicon").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            prob = float(fields[1]) if len(fields) > 2 else None
        except ValueError:
            prob = None
        if prob is None:
            raise NnetError(f"{path}:{n}: expected 'word prob phone1 phone2 ...', got '{line.strip()}'")
        if prob != 1.0:
            raise NnetError(f"{path}:{n}: word '{fields[0]}': pronunciation probability {fields[1]}: only 1.0 is "
                            f"supported; remove lexiconp.txt to use lexicon.txt")
        out.append((fields[0], fields[2:]))
    return out


def read(path):
    """The DictDir at ``path``, validated."""
    if not os.path.isdir(path):
        raise NnetError(f"{path}: no such directory (a dict dir has {', '.join(FILES)})")
    lexicon_txt, lexiconp_txt = os.path.join(path, "lexicon.txt"), os.path.join(path, "lexiconp.txt")
    if os.path.exists(lexiconp_txt):
        lexicon = _lexiconp(lexiconp_txt)
        if os.path.exists(lexicon_txt) and lexicon != read_lexicon(lexicon_txt):
            raise NnetError(f"{lexiconp_txt}: does not match {lexicon_txt} (remove lexiconp.txt: prepare_lang.sh "
                            f"uses it first)")
    elif os.path.exists(lexicon_txt):
        lexicon = read_lexicon(lexicon_txt)
    else:
        raise NnetError(f"{lexicon_txt}: no such file (a dict dir has {', '.join(FILES)})")
    optional = _phone_lines(os.path.join(path, "optional_silence.txt"))
    if len(optional) != 1 or len(optional[0]) != 1:
        raise NnetError(f"{os.path.join(path, 'optional_silence.txt')}: expected one phone on one line")
    return DictDir(lexicon, _phone_lines(os.path.join(path, "silence_phones.txt")),
                   _phone_lines(os.path.join(path, "nonsilence_phones.txt")), optional[0][0],
                   _phone_lines(os.path.join(path, "extra_questions.txt"), required=False), path).validate()


def of_lexicon(lexicon, silence_phone="SIL", silence_word="!SIL", path="lexicon"):
    """The dict dir a bare lexicon.txt stands for (nnet-prepare-lang's LEXICON form): the one
    silence phone ``silence_phone``, also the optional silence; every other phone its own base
    phone (non-silence), sorted; no extra questions."""
    phone_set = {p for _, ps in lexicon for p in ps}
    if silence_phone not in phone_set:
        raise NnetError(f"lexicon has no silence phone '{silence_phone}' (add e.g. '{silence_word} {silence_phone}')")
    if phone_set == {silence_phone}:
        raise NnetError(f"lexicon has no phone but the silence phone '{silence_phone}'")
    return DictDir(lexicon, [[silence_phone]], [[p] for p in sorted(phone_set - {silence_phone})],
                   silence_phone, (), path)
