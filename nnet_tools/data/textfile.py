"""Kaldi's line-per-record text files (text, lexicon.txt, wav.scp, ...)."""
from nnet_tools.errors import read_error


def read_text(path, what="the file"):
    """The whole of a UTF-8 text file; an unreadable one is one line."""
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, what, e) from None


def records(path):
    """[(line number, fields, line)] of every non-blank line; an unreadable file is one line."""
    lines = read_text(path).splitlines(keepends=True)
    return [(n, line.split(), line) for n, line in enumerate(lines, 1) if line.split()]
