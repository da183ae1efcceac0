"""Kaldi's line-per-record text files (text, lexicon.txt, wav.scp, ...)."""
from nnet_tools.errors import read_error


def records(path):
    """[(line number, fields, line)] of every non-blank line; an unreadable file is one line."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "the file", e) from None
    return [(n, line.split(), line) for n, line in enumerate(lines, 1) if line.split()]
