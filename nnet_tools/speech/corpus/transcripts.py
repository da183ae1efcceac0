"""Kaldi ``text`` files: 'utt word1 word2 ...' per line."""
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
