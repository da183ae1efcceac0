"""Kaldi ``text`` files: 'utt word1 word2 ...' per line."""
from nnet_tools.errors import NnetError


def read_text(path):
    """{utt: [words]}; an utterance may have no words (an empty transcript)."""
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if fields[0] in out:
                    raise NnetError(f"{path}:{n}: utterance '{fields[0]}' appears twice")
                out[fields[0]] = fields[1:]
    except OSError as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    return out
