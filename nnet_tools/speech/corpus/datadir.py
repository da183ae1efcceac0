"""A Kaldi data dir, checked as utils/validate_data_dir.sh checks it, and its ``segments`` file.

Files (Kaldi's): utt2spk and spk2utt (always), text, wav.scp (keyed by utterance, or by
recording when there is a ``segments`` file: 'utt reco start end' in seconds), feats.scp,
cmvn.scp (keyed by speaker). Every table is sorted on its first field in byte order (Kaldi's
LC_ALL=C sort) with no key twice, and the utterance lists of the per-utterance files agree.
"""
import os

from nnet_tools.data.textfile import printable, records
from nnet_tools.errors import NnetError
from nnet_tools.speech.corpus import transcripts

# Where a message points a user whose file is not sorted: Kaldi's own fix.
SORT_FIX = "sort it with: LC_ALL=C sort -k1,1 -o {path} {path} (or utils/fix_data_dir.sh in Kaldi)"


def read_table(path, what, min_fields=2, max_fields=None):
    """[(key, [fields after the key])] of a data-dir file, in file order: every line with
    ``min_fields``..``max_fields`` fields, no key twice, keys sorted (byte order)."""
    out, last = [], None
    for n, fields, line in records(path):
        if len(fields) < min_fields or (max_fields and len(fields) > max_fields):
            count = f"{min_fields}" + (f"-{max_fields}" if max_fields and max_fields != min_fields else
                                       "" if max_fields else " or more")
            raise NnetError(f"{printable(path)}:{n}: expected {count} fields in a {what} line, got '{line.strip()}'")
        key = fields[0]
        if last is not None and key <= last:
            problem = "appears twice; remove one" if key == last else \
                f"comes after '{last}': not sorted; {SORT_FIX.format(path=path)}"
            raise NnetError(f"{printable(path)}:{n}: key '{key}' {problem}")
        last = key
        out.append((key, fields[1:]))
    return out


def read_segments(path):
    """[(utt, reco, start, end, channel)] of a segments file, as Kaldi's extract-segments reads it:
    'utt reco start end [channel]' in seconds; end -1 is the end of the recording, channel -1
    (none given) the only one. A line it would skip (bad numbers, start >= end) is an error here."""
    out = []
    for n, fields, line in records(path):
        where = f"{printable(path)}:{n}: segment '{fields[0]}'"
        if len(fields) not in (4, 5):
            raise NnetError(f"{where}: expected 'utt reco start end [channel]', got '{line.strip()}'")
        try:
            start, end = float(fields[2]), float(fields[3])
            channel = int(fields[4]) if len(fields) == 5 else -1
        except ValueError:
            raise NnetError(f"{where}: start, end (seconds) and channel must be numbers, "
                            f"got '{line.strip()}'") from None
        if not (0 <= start < float("inf")) or not (end == -1 or start < end < float("inf")):
            raise NnetError(f"{where}: start {fields[2]}, end {fields[3]}: need 0 <= start < end "
                            f"(or end -1, the end of the recording)")
        if len(fields) == 5 and channel < 0:
            raise NnetError(f"{where}: channel {fields[4]}: need 0 or more")
        out.append((fields[0], fields[1], start, end, channel))
    return out


def spk2utt_of(utt2spk):
    """spk2utt's [(spk, [utts])] for utt2spk's [(utt, spk)], as utils/utt2spk_to_spk2utt.pl
    makes it: speakers in order of their first utterance."""
    out = {}
    for utt, spk in utt2spk:
        out.setdefault(spk, []).append(utt)
    return list(out.items())


def _path(data, name):
    return os.path.join(data, name)


def _same_keys(data, name, keys, want, what, some_missing=False):
    """Fail unless ``keys`` (of data/name) are exactly ``want``, naming one key each way. With
    ``some_missing``, keys of ``want`` it lacks give a warning instead (returned, or None): the
    features of a wav that could not be read, which Kaldi's fix_data_dir.sh would drop."""
    extra, missing = sorted(set(keys) - set(want)), sorted(set(want) - set(keys))
    if missing and not extra and some_missing:
        return (f"{_path(data, name)}: {len(want) - len(missing)} of the {len(want)} keys of {what} "
                f"('{missing[0]}' is missing): the others are left out")
    if extra or missing:
        detail = "; ".join(p for p in (extra and f"'{extra[0]}' ({len(extra)} in all) is not in {what}",
                                       missing and f"'{missing[0]}' of {what} is missing ({len(missing)} in all)")
                           if p)
        raise NnetError(f"{_path(data, name)}: keys differ from {what}: {detail}")


def validate(data, no_feats=False, no_text=False, no_wav=False, lang=None):
    """Check a data dir as Kaldi's utils/validate_data_dir.sh does; raise NnetError naming the
    file, the key and what is wrong, at the first fault. With ``lang`` (a dir with words.txt, and
    perhaps oov.txt: a lang dir or a graph dir), the text's words are checked against it.

    Returns (utterances, speakers, warnings): the OOV summary is a warning."""
    if not os.path.isdir(data):
        raise NnetError(f"{data}: no such directory")
    # wav.scp is needed to make features (--no-feats) and by a segments file; checked when there.
    for name in ("utt2spk", "spk2utt") + (() if no_text else ("text",)) + (() if no_feats else ("feats.scp",)) \
            + (("wav.scp",) if (no_feats and not no_wav) or os.path.exists(_path(data, "segments")) else ()):
        if not os.path.isfile(_path(data, name)):
            fix = " (make it with: utils/utt2spk_to_spk2utt.pl {0}/utt2spk > {0}/spk2utt)".format(data) \
                if name == "spk2utt" else ""
            raise NnetError(f"{_path(data, name)}: no such file{fix}")
    utt2spk = [(u, f[0]) for u, f in read_table(_path(data, "utt2spk"), "utt2spk", 2, 2)]
    if not utt2spk:
        raise NnetError(f"{_path(data, 'utt2spk')}: empty")
    utts = [u for u, _ in utt2spk]
    for (u1, s1), (u2, s2) in zip(utt2spk, utt2spk[1:]):
        if s2 < s1:  # Kaldi: sort -k2 must give the same order
            raise NnetError(f"{_path(data, 'utt2spk')}: utterance '{u2}' of speaker '{s2}' comes after '{u1}' of "
                            f"'{s1}': utt2spk is not sorted on speakers too; make each speaker-id a prefix of "
                            f"its utterance-ids (e.g. {s2}-{u2})")
    spk2utt = [(s, f) for s, f in read_table(_path(data, "spk2utt"), "spk2utt")]
    if spk2utt != spk2utt_of(utt2spk):
        raise NnetError(f"{_path(data, 'spk2utt')}: does not match utt2spk; remake it with: "
                        f"utils/utt2spk_to_spk2utt.pl {data}/utt2spk > {data}/spk2utt")
    lines = []
    if not no_text:
        refs = read_table(_path(data, "text"), "text", 1)
        _same_keys(data, "text", [u for u, _ in refs], utts, "utt2spk")
        if lang is not None:
            lines += transcripts.check_words(dict(refs), lang, _path(data, "text"))
    if os.path.exists(_path(data, "segments")):
        segments = read_segments(_path(data, "segments"))
        read_table(_path(data, "segments"), "segments", 4, 5)  # sorted, each once
        _same_keys(data, "segments", [s[0] for s in segments], utts, "utt2spk")
        recordings = sorted({s[1] for s in segments})
        wav = [r for r, _ in read_table(_path(data, "wav.scp"), "wav.scp")]
        _same_keys(data, "wav.scp", wav, recordings, "the recordings of segments")
    elif not no_wav and os.path.exists(_path(data, "wav.scp")):
        _same_keys(data, "wav.scp", [u for u, _ in read_table(_path(data, "wav.scp"), "wav.scp")], utts, "utt2spk")
    if not no_feats:
        lines.append(_same_keys(data, "feats.scp", [u for u, _ in read_table(_path(data, "feats.scp"), "feats.scp",
                                                                              2, 2)], utts, "utt2spk", True))
    if not no_feats and os.path.exists(_path(data, "cmvn.scp")):  # stale until the features are remade
        lines.append(_same_keys(data, "cmvn.scp", [s for s, _ in read_table(_path(data, "cmvn.scp"), "cmvn.scp",
                                                                             2, 2)], [s for s, _ in spk2utt],
                                "spk2utt", True))
    return len(utts), len(spk2utt), [line for line in lines if line]
