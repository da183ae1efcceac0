"""Kaldi ``text`` files: 'utt word1 word2 ...' per line."""
from nnet_tools.data.textfile import records
from nnet_tools.errors import NnetError


def read_text(path):
    """{utt: [words]}; an utterance may have no words (an empty transcript)."""
    out = {}
    for n, fields, _ in records(path):
        if fields[0] in out:
            raise NnetError(f"{path}:{n}: utterance '{fields[0]}' appears twice")
        out[fields[0]] = fields[1:]
    return out
