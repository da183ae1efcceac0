"""The one error type programs turn into a single line and exit status 1."""


class NnetError(Exception):
    """A user-facing failure: bad input, unreadable file, impossible request.

    The message is one line naming the file, the key (if any) and what is wrong, e.g.
    ``data/train/feats.scp: utt 'u12': feature dim 40 does not match the model's 13``.
    """


def not_utf8(error, offset=True):
    """How a UnicodeDecodeError reads in a message: 'is not UTF-8 text (byte 0xff at offset 12)'."""
    where = f" at offset {error.start}" if offset else ""
    return f"is not UTF-8 text (byte {error.object[error.start]:#04x}{where})"


def read_error(path, what, error):
    """The NnetError for a text file that could not be read (OSError) or decoded (not UTF-8)."""
    if isinstance(error, UnicodeDecodeError):
        return NnetError(f"{path}: {what} {not_utf8(error)}")
    return NnetError(f"{path}: cannot read {what}: {error.strerror}")
