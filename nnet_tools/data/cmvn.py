"""Cepstral mean and variance normalisation, as Kaldi's compute-cmvn-stats and apply-cmvn
(src/transform/cmvn.cc).

Statistics are Kaldi's ``Matrix<double>`` of shape [2, D+1]: row 0 holds the per-dimension sums
of the features with the frame count in the last column, row 1 the sums of squares with 0 in
the last column. Statistics add, so a speaker's are the sum of its utterances'.
"""
import os

import numpy as np

from nnet_tools.data import tables
from nnet_tools.data.textfile import table_file
from nnet_tools.data.finite import require_finite
from nnet_tools.errors import NnetError, read_error
from nnet_tools.log import logger

VAR_FLOOR = 1.0e-20  # Kaldi's floor on the variance in ApplyCmvn


class MissingStats(NnetError):
    """No statistics (or no speaker) for an utterance: apply-cmvn skips it, get_egs fails."""


def compute_cmvn_stats(feats, weights=None, where="CMVN"):
    """[T, D] features (optionally weighted per frame) -> [2, D+1] float64 statistics.
    ``where`` names the features in errors (e.g. "feats.scp: key 'utt1'")."""
    feats = np.asarray(feats, dtype=np.float32)
    if feats.ndim != 2 or feats.shape[1] == 0:
        raise NnetError(f"{where}: CMVN statistics need a [frames, dim] matrix, got shape {feats.shape}")
    require_finite(feats, where)
    w = np.ones(len(feats), np.float32) if weights is None else np.asarray(weights, np.float32)
    stats = np.zeros((2, feats.shape[1] + 1))
    # Kaldi multiplies in float and adds into double; so do we.
    stats[0, :-1] = (feats * w[:, None]).sum(0, dtype=np.float64)
    stats[1, :-1] = (feats * feats * w[:, None]).sum(0, dtype=np.float64)
    stats[0, -1] = w.sum(dtype=np.float64)
    return stats


def accumulate(stats_list):
    """The sum of several [2, D+1] statistics (e.g. a speaker's utterances); None if empty."""
    total = None
    for stats in stats_list:
        total = np.array(stats, dtype=np.float64) if total is None else total + stats
    return total


def apply_cmvn(feats, stats, norm_means=True, norm_vars=False, where="CMVN"):
    """Normalise [T, D] features with [2, D+1] statistics, exactly as Kaldi's apply-cmvn.

    Means only: x - mean. With variances: (x - mean) / sqrt(var), var = sumsq/count - mean^2
    floored at 1e-20. The offset and scale are computed in double and applied in float.
    ``where`` names the statistics in errors (e.g. "cmvn.scp: speaker 'spk1'").
    """
    feats = np.asarray(feats, dtype=np.float32)
    if norm_vars and not norm_means:
        raise NnetError("you cannot normalise the variance but not the mean (Kaldi's apply-cmvn refuses too)")
    if not norm_means:
        return feats.copy()
    stats = np.asarray(stats, dtype=np.float64)
    dim = stats.shape[1] - 1 if stats.ndim == 2 else -1
    if stats.ndim != 2 or stats.shape[0] != 2 or feats.ndim != 2 or feats.shape[1] != dim:
        raise NnetError(f"{where}: dim mismatch: CMVN statistics {'x'.join(map(str, stats.shape))}, "
                        f"features {'x'.join(map(str, feats.shape))}")
    require_finite(stats, where, "CMVN statistics", rows=None)
    count = stats[0, dim]
    if count < 1.0:
        raise NnetError(f"{where}: insufficient statistics for CMVN: count = {count:g}")
    mean = stats[0, :dim] / count
    if norm_vars:
        var = stats[1, :dim] / count - mean * mean
        if (var < VAR_FLOOR).any():
            logger.warning(f"{where}: flooring cepstral variance from {var.min():g} to {VAR_FLOOR:g}")
        scale = 1.0 / np.sqrt(np.maximum(var, VAR_FLOOR))
        if not np.isfinite(scale).all():
            raise NnetError(f"{where}: NaN or infinity in cepstral mean/variance computation")
        offset = -(mean * scale)
    else:
        scale, offset = np.ones(dim), -mean
    return offset.astype(np.float32) + feats * scale.astype(np.float32)


def _text_table_file(name, what):
    """Kaldi programs take utt2spk/spk2utt as rspecifiers ('ark:data/train/utt2spk'); a plain
    file name is accepted too. Not stdin: a program may read them more than once."""
    path = table_file(name, what)
    if path == "-":
        raise NnetError(f"{name}: give the {what} file itself (or ark:FILE), not standard input")
    return path


def read_utt2spk(path):
    """A Kaldi ``utt2spk`` file (or 'ark:FILE') as {utterance: speaker}."""
    return dict(_read_pairs(_text_table_file(path, "utt2spk"), "utt2spk"))


def read_spk2utt(path):
    """A Kaldi ``spk2utt`` file (or 'ark:FILE') as {speaker: [utterances]}, in file order."""
    path = _text_table_file(path, "spk2utt")
    try:
        with open(path) as f:
            lines = [line.split() for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "spk2utt", e) from None
    spk2utt = {}
    for n, fields in enumerate(lines, 1):
        if len(fields) < 2:
            raise NnetError(f"{path}: line {n}: expected '<speaker> <utt1> [<utt2> ...]'")
        if fields[0] in spk2utt:
            raise NnetError(f"{path}: line {n}: speaker '{fields[0]}' listed twice")
        spk2utt[fields[0]] = fields[1:]
    return spk2utt


def _read_pairs(path, what):
    try:
        with open(path) as f:
            lines = [line.split() for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, what, e) from None
    seen = set()
    for n, fields in enumerate(lines, 1):
        if len(fields) != 2:
            raise NnetError(f"{path}: line {n}: expected '<utterance> <speaker>', got {len(fields)} fields")
        if fields[0] in seen:
            raise NnetError(f"{path}: line {n}: utterance '{fields[0]}' listed twice")
        seen.add(fields[0])
        yield fields


def parse_cmvn_opts(text, where="--cmvn-opts"):
    """Kaldi's cmvn_opts string, e.g. '--norm-vars=true', -> (norm_means, norm_vars), with
    apply-cmvn's defaults (true, false). A bare '--norm-vars' means true, as in Kaldi."""
    values = {"--norm-means": True, "--norm-vars": False}
    for token in (text or "").split():
        name, eq, value = token.partition("=")
        if name not in values:
            raise NnetError(f"{where}: unsupported option '{token}' (only --norm-means and --norm-vars)")
        if not eq:
            value = "true"
        if value.lower() not in ("true", "false"):
            raise NnetError(f"{where}: '{token}': the value must be true or false")
        values[name] = value.lower() == "true"
    return values["--norm-means"], values["--norm-vars"]


def format_cmvn_opts(norm_means, norm_vars):
    """The cmvn_opts string that get_egs records: apply-cmvn's options for what was done."""
    if not norm_means:
        return "--norm-means=false"
    return f"--norm-means=true --norm-vars={str(norm_vars).lower()}"


def applier_for(cmvn=None, utt2spk=None, cmvn_opts="", online_cmvn=None):
    """The applier programs build from --cmvn, --utt2spk, --cmvn-opts and --online-cmvn: a
    CmvnApplier, an online_cmvn.OnlineCmvnApplier, or None when neither is asked for."""
    if online_cmvn is not None:
        if cmvn is not None or utt2spk is not None:
            raise NnetError(f"--online-cmvn={online_cmvn} and --cmvn/--utt2spk: give one kind of CMVN")
        from nnet_tools.data.online_cmvn import OnlineCmvnApplier  # here: that module builds on this one
        return OnlineCmvnApplier(online_cmvn, *parse_cmvn_opts(cmvn_opts))
    if cmvn is None:
        if utt2spk is not None:
            raise NnetError(f"--utt2spk={utt2spk} given without --cmvn (the statistics to apply)")
        return None
    return CmvnApplier(cmvn, utt2spk, *parse_cmvn_opts(cmvn_opts))


def is_table(name):
    """Whether ``name`` is an rspecifier or wspecifier (ark:..., scp:...), not a file name."""
    options = name.partition(":")[0]
    return ":" in name and any(o.strip() in ("ark", "scp") for o in options.split(","))


class CmvnApplier:
    """Per-speaker (or per-utterance, or global) statistics looked up by utterance id.

    ``CmvnApplier("scp:data/train/cmvn.scp", "data/train/utt2spk")`` keys the statistics by
    speaker, as apply-cmvn --utt2spk does; without utt2spk they are keyed by utterance. A
    statistics argument that is not an rspecifier is one global matrix file (Kaldi's
    cmvn-stats-rxfilename). ``CmvnApplier.from_data_dir("data/train")`` reads the data dir's
    cmvn.scp and utt2spk. A speaker or utterance without statistics is an NnetError naming
    the file and the key.
    """

    def __init__(self, cmvn, utt2spk=None, norm_means=True, norm_vars=False):
        if norm_vars and not norm_means:
            raise NnetError("--norm-vars=true needs --norm-means=true (Kaldi's apply-cmvn refuses it too)")
        self.name, self.norm_means, self.norm_vars = cmvn, norm_means, norm_vars
        self.utt2spk_path = utt2spk
        self._utt2spk = None if utt2spk is None else read_utt2spk(utt2spk)
        if is_table(cmvn):
            self._global, self._table = None, tables.RandomAccessDoubleMatrices(cmvn)
        else:
            self._global, self._table = tables.read_double_matrix(cmvn), None

    @classmethod
    def from_data_dir(cls, data_dir, **options):
        for name in ("cmvn.scp", "utt2spk"):
            if not os.path.isfile(os.path.join(data_dir, name)):
                raise NnetError(f"{data_dir}: no {name} (CMVN needs both cmvn.scp and utt2spk)")
        return cls(f"scp:{os.path.join(data_dir, 'cmvn.scp')}", os.path.join(data_dir, "utt2spk"), **options)

    def opts(self):
        """Kaldi's cmvn_opts string for these options, as get_egs records it."""
        return format_cmvn_opts(self.norm_means, self.norm_vars)

    def stats(self, utt):
        """The [2, D+1] statistics that normalise utterance ``utt``."""
        if self._global is not None:
            return self._global
        key = utt
        if self._utt2spk is not None:
            if utt not in self._utt2spk:
                raise MissingStats(f"{self.utt2spk_path}: no speaker for utterance '{utt}'")
            key = self._utt2spk[utt]
        if key not in self._table:
            what = f"speaker '{key}' (of utterance '{utt}')" if key != utt else f"utterance '{utt}'"
            raise MissingStats(f"{self.name}: no CMVN statistics for {what}")
        return self._table[key]

    def __call__(self, utt, feats):
        """Utterance ``utt``'s features, normalised."""
        if not self.norm_means:
            return np.asarray(feats, dtype=np.float32)
        return apply_cmvn(feats, self.stats(utt), self.norm_means, self.norm_vars,
                          where=f"{self.name}: utterance '{utt}'")

    def close(self):
        if self._table is not None:
            self._table.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def speaker_stats(feats_rspecifier, spk2utt=None, counts=None):
    """Yield (key, statistics) as compute-cmvn-stats does: per speaker of the ``spk2utt`` file
    (features looked up by utterance; a missing one is warned about and counted) or else per
    utterance. ``counts`` (a dict) gets "done" and "errors", the numbers Kaldi logs."""
    counts = {} if counts is None else counts
    counts.update(done=0, errors=0)
    if spk2utt is None:
        yield from _utterance_stats(feats_rspecifier, counts)
        return
    with tables.RandomAccessMatrices(feats_rspecifier) as feats:
        for spk, utts in read_spk2utt(spk2utt).items():
            found = []
            for utt in utts:
                if utt not in feats:
                    logger.warning(f"{feats_rspecifier}: did not find features for utterance '{utt}'")
                    counts["errors"] += 1
                    continue
                found.append((utt, compute_cmvn_stats(feats[utt], where=f"{feats_rspecifier}: key '{utt}'")))
                counts["done"] += 1
            if found:
                yield spk, _summed(found, feats_rspecifier, f"speaker '{spk}''s utterances")
            else:
                logger.warning(f"{spk2utt}: no stats accumulated for speaker '{spk}'")


def global_stats(feats_rspecifier, counts=None):
    """compute-cmvn-stats with a file, not a table, as output: one [2, D+1] matrix over every
    utterance (None if there is none). ``counts`` as in speaker_stats."""
    counts = {} if counts is None else counts
    counts.update(done=0, errors=0)
    return _summed(_utterance_stats(feats_rspecifier, counts), feats_rspecifier, "the utterances")


def _utterance_stats(feats_rspecifier, counts):
    for utt, feats in tables.read_matrices(feats_rspecifier):
        yield utt, compute_cmvn_stats(feats, where=f"{feats_rspecifier}: key '{utt}'")
        counts["done"] += 1


def _summed(named_stats, feats_rspecifier, whose):
    """The sum of (utterance, statistics) pairs; a dimension that changes is one line (Kaldi asserts)."""
    total = None
    for utt, stats in named_stats:
        if total is None:
            total = stats.copy()
        elif stats.shape != total.shape:
            raise NnetError(f"{feats_rspecifier}: key '{utt}': dimension {stats.shape[1] - 1} differs "
                            f"from the {total.shape[1] - 1} of {whose} before it")
        else:
            total += stats
    return total
