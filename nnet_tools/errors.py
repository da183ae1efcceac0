"""The one error type programs turn into a single line and exit status 1."""


class NnetError(Exception):
    """A user-facing failure: bad input, unreadable file, impossible request.

    The message is one line naming the file, the key (if any) and what is wrong, e.g.
    ``data/train/feats.scp: utt 'u12': feature dim 40 does not match the model's 13``.
    """
