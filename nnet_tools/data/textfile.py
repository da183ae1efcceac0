"""Kaldi's line-per-record text files (text, lexicon.txt, wav.scp, ...)."""
import sys

from nnet_tools.errors import NnetError, read_error


def printable(path):
    """How a message names ``path``: '-' is Kaldi's 'standard input' (PrintableRxfilename)."""
    return "standard input" if path == "-" else path


def read_text(path, what="the file"):
    """The whole of a UTF-8 text file, or of stdin for '-'; an unreadable one is one line."""
    try:
        if path == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(printable(path), what, e) from None


def records(path):
    """[(line number, fields, line)] of every non-blank line; an unreadable file is one line."""
    lines = read_text(path).splitlines(keepends=True)
    return [(n, line.split(), line) for n, line in enumerate(lines, 1) if line.split()]


def table_file(specifier, what, kind="ark"):
    """The file behind a text table named as a Kaldi rspecifier ('ark:data/test/text', 'ark:-';
    'scp:wav.scp' when the table is a list of files, kind='scp') or as the file itself ('-' is
    stdin, as Kaldi's rxfilenames have it)."""
    options, colon, target = specifier.partition(":")
    types = {o.strip() for o in options.split(",")}
    if not colon or not types & {"ark", "scp"}:
        return specifier  # a plain file name, even one with a ':' in it
    if kind not in types or len(types & {"ark", "scp"}) > 1:
        raise NnetError(f"{specifier}: the {what} is read as {kind}:FILE (or the file itself)")
    if not target:
        raise NnetError(f"{specifier}: no file name after ':' (use '-' for stdin)")
    if target.startswith("|") or target.rstrip().endswith("|"):
        raise NnetError(f"{specifier}: a command is not supported for the {what}: give the file, "
                        f"or pipe it in with {kind}:-")
    return target
