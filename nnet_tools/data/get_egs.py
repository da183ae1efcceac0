"""Egs dumping: features + per-frame targets -> an egs dir (Kaldi's steps/nnet3/get_egs.sh around
nnet3-get-egs, nnet3-copy-egs --random, nnet3-shuffle-egs and nnet3-subset-egs, as one program).

Memory is O(one archive) whatever the data size: a cheap first pass over the targets gives the
utterance list and frame count (hence the archive count); the features are then streamed once, each
utterance cut into egs that are appended to per-archive spool files on disk; finally the archives
are loaded, shuffled and written one at a time. Seeds follow Kaldi: utterance lists and scattering
from --srand, archive k (1-based) shuffled with seed k + srand.
"""
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Optional

import numpy as np

from nnet_tools.data.cmvn import format_cmvn_opts
from nnet_tools.data.egs import write_archive
from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text
from nnet_tools.log import logger
from nnet_tools.data.tables import RandomAccessIntVectors, read_int_vectors, read_matrices

SPOOL_BUFFER_BYTES = 64 << 20  # egs held in memory before the spool files are appended to
MAX_WARNINGS = 10  # per-utterance warnings printed before they are only counted
TRAIN, VALID, SUBSET = 0, 1, 2  # utterance roles; SUBSET utterances are also training data
_SELECT, _SCATTER, _SHUFFLE, _SUBSET = 0, 1, 2, 3  # independent random streams (_SUBSET..+3)


@dataclass
class EgsOptions:
    """get_egs.sh's defaults; targets_length_tolerance is nnet3-get-egs's --targets-length-tolerance."""
    frames_per_eg: int = 8
    left_context: int = 4
    right_context: int = 4
    samples_per_iter: int = 400000
    num_utts_subset: int = 300
    num_frames_diagnostic: int = 10000
    num_train_frames_combine: int = 60000
    num_valid_frames_combine: int = 0
    srand: int = 0
    num_targets: Optional[int] = None
    targets_length_tolerance: int = 2

    def check(self):
        for name in ("frames_per_eg", "samples_per_iter", "num_utts_subset"):
            if getattr(self, name) < 1:
                raise NnetError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("left_context", "right_context", "num_frames_diagnostic", "num_train_frames_combine",
                     "num_valid_frames_combine", "targets_length_tolerance"):
            if getattr(self, name) < 0:
                raise NnetError(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        if self.num_targets is not None and self.num_targets < 1:
            raise NnetError(f"--num-targets must be at least 1, got {self.num_targets}")


def _rng(seed, stream):
    return np.random.default_rng([stream, seed % (1 << 32)])


def scan_targets(rspecifier, num_targets=None):
    """First, cheap pass: {key: number of targets} in table order and the largest target id.

    Target ids are checked here, so bad targets fail before any eg is written."""
    lengths, max_id = {}, -1
    for key, ids in read_int_vectors(rspecifier):
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0:
                raise NnetError(f"{rspecifier}: utterance '{key}': negative target id {lo}")
            if num_targets is not None and hi >= num_targets:
                raise NnetError(f"{rspecifier}: utterance '{key}': target id {hi} >= --num-targets {num_targets}")
            max_id = max(max_id, hi)
        lengths[key] = ids.size
    return lengths, max_id


def split_utterances(keys, num_utts_subset, srand, where):
    """Kaldi's valid_uttlist (excluded from training) and train_subset_uttlist (not excluded):
    index sets of num_utts_subset random utterances each, disjoint."""
    n = len(keys)
    if n <= 4 * num_utts_subset:
        raise NnetError(f"{where}: only {n} utterances with targets; get_egs needs more than 4 x "
                        f"--num-utts-subset = {4 * num_utts_subset} (use a smaller --num-utts-subset)")
    perm = _rng(srand, _SELECT).permutation(n)
    return set(perm[:num_utts_subset].tolist()), set(perm[num_utts_subset:2 * num_utts_subset].tolist())


def record_dtype(opts, feat_dim):
    """One eg as a fixed-size record, so spools are flat files that load as one array."""
    rows = opts.left_context + opts.frames_per_eg + opts.right_context
    return np.dtype([("inputs", np.float32, (rows, feat_dim)), ("labels", np.int32, (opts.frames_per_eg,)),
                     ("utt", np.int64), ("t0", np.int64)])


def cut_utterance(feats, targets, opts):
    """An utterance -> (inputs [n, left+fpe+right, D], labels [n, fpe], first frames [n]).

    Chunk c covers frames c*fpe .. c*fpe+fpe-1 with no overlap, so every labelled frame is in exactly
    one eg; input rows past the edges repeat the edge frame (Kaldi's padding). A frame is labelled
    when both features and targets have it (they may differ by the length tolerance): positions
    past that get label -1, and egs left without any label are dropped."""
    t, fpe = feats.shape[0], opts.frames_per_eg
    labelled = min(t, len(targets))
    t0 = np.arange(0, labelled, fpe)
    rows = t0[:, None] + np.arange(-opts.left_context, fpe + opts.right_context)
    frames = t0[:, None] + np.arange(fpe)
    labels = np.where(frames < labelled, targets[np.minimum(frames, labelled - 1)], -1).astype(np.int32)
    return feats[np.clip(rows, 0, t - 1)], labels, t0


class Spools:
    """Per-bucket record files, appended through one bounded in-memory buffer."""

    def __init__(self, directory, num_buckets, dtype):
        self.dtype = dtype
        self.paths = [os.path.join(directory, f"{b}.rec") for b in range(num_buckets)]
        self.counts = [0] * num_buckets
        self._buffers = [[] for _ in range(num_buckets)]
        self._buffered = 0

    def add(self, bucket, records):
        self._buffers[bucket].append(records)
        self.counts[bucket] += len(records)
        self._buffered += records.nbytes
        if self._buffered > SPOOL_BUFFER_BYTES:
            self.flush()

    def flush(self):
        for path, buffer in zip(self.paths, self._buffers):
            if buffer:
                with open(path, "ab") as f:
                    for records in buffer:
                        records.tofile(f)
                buffer.clear()
        self._buffered = 0

    def load(self, bucket):
        """A read-only memory map of one bucket's records."""
        if not self.counts[bucket]:
            return np.zeros(0, self.dtype)
        return np.memmap(self.paths[bucket], self.dtype, "r", shape=(self.counts[bucket],))

    def remove(self, bucket):
        if os.path.exists(self.paths[bucket]):
            os.unlink(self.paths[bucket])


class _Dumper:
    """The streaming pass: features in, egs spooled by archive (training) or pool (valid, subset)."""

    def __init__(self, keys, roles, num_archives, tmpdir, opts):
        self.keys, self.roles, self.opts = keys, roles, opts
        self.index = {k: i for i, k in enumerate(keys)}
        self.num_archives, self.tmpdir = num_archives, tmpdir
        self.valid_pool, self.subset_pool = num_archives, num_archives + 1
        self.scatter = _rng(opts.srand, _SCATTER)
        self.spools, self.feat_dim = None, None
        self.done = self.errors = self.egs = self.frames = self.train_egs = self.train_frames = 0

    def skip(self, message):
        self.errors += 1
        if self.errors <= MAX_WARNINGS:
            logger.warning(message + ("" if self.errors < MAX_WARNINGS else
                                      " (further per-utterance warnings are only counted)"))

    def run(self, feats_rspecifier, targets_rspecifier, cmvn=None):
        with RandomAccessIntVectors(targets_rspecifier) as targets:
            for key, feats in read_matrices(feats_rspecifier):
                if key not in targets or key not in self.index:
                    self.skip(f"No targets for key {key}")
                    continue
                if cmvn is not None:
                    feats = cmvn(key, feats)  # Kaldi's get_egs.sh pipes the features through apply-cmvn
                ids = targets[key]
                if feats.shape[0] == 0 or abs(len(ids) - feats.shape[0]) > self.opts.targets_length_tolerance:
                    self.skip(f"Targets do not have expected length for utterance {key}: expected length = "
                              f"{feats.shape[0]}, got {len(ids)} (--targets-length-tolerance "
                              f"{self.opts.targets_length_tolerance})")
                    continue
                self.add(key, feats, ids, feats_rspecifier)
        if self.spools is not None:
            self.spools.flush()
        # Kaldi's wording (nnet3-get-egs), double space included.
        logger.info(f"Finished generating examples, successfully processed {self.done} feature files, wrote "
                    f"{self.egs} examples,  with {self.frames} egs in total; {self.errors} files had errors.")
        if self.errors:
            logger.warning(f"{self.errors} utterances had errors and could not be processed.")

    def add(self, key, feats, ids, where):
        if self.spools is None:
            self.feat_dim = feats.shape[1]
            self.spools = Spools(self.tmpdir, self.num_archives + 2, record_dtype(self.opts, self.feat_dim))
        elif feats.shape[1] != self.feat_dim:
            raise NnetError(f"{where}: utterance '{key}': feature dim {feats.shape[1]} differs from "
                            f"{self.feat_dim} of the utterances before it")
        inputs, labels, t0 = cut_utterance(feats, ids, self.opts)
        records = np.empty(len(t0), self.spools.dtype)
        records["inputs"], records["labels"], records["utt"], records["t0"] = inputs, labels, self.index[key], t0
        frames = int((labels >= 0).sum())
        self.done += 1
        self.egs += len(records)
        self.frames += frames
        role = self.roles.get(key, TRAIN)
        if role == VALID:
            self.spools.add(self.valid_pool, records)
            return
        if role == SUBSET:
            self.spools.add(self.subset_pool, records)
        # nnet3-copy-egs --random: each eg to an archive drawn at random.
        bucket = self.scatter.integers(self.num_archives, size=len(records))
        for b in np.unique(bucket):
            self.spools.add(int(b), records[bucket == b])
        self.train_egs += len(records)
        self.train_frames += frames


def _write(path, records, order, keys, opts):
    """Write records[order] as an egs archive; fields are gathered one at a time, so a memory-mapped
    spool is read once, in ``order``, into arrays write_archive need not copy."""
    utts, t0 = records["utt"][order].tolist(), records["t0"][order].tolist()
    write_archive(path, records["inputs"][order], records["labels"][order],
                  [f"{keys[u]}-{t}" for u, t in zip(utts, t0)], opts.left_context, opts.right_context)


def _subset(records, n, seed, stream):
    """nnet3-subset-egs: n random egs (all if fewer), in random order."""
    return records[_rng(seed, stream).permutation(len(records))[:n]]


def _subsets(dumper, opts, where):
    """valid_diagnostic, train_diagnostic and combine (= valid_combine ++ train_combine) records."""
    fpe = opts.frames_per_eg
    valid, train = dumper.spools.load(dumper.valid_pool), dumper.spools.load(dumper.subset_pool)
    out = {"valid_diagnostic.egs": _subset(valid, opts.num_frames_diagnostic // fpe, opts.srand, _SUBSET),
           "train_diagnostic.egs": _subset(train, opts.num_frames_diagnostic // fpe, opts.srand, _SUBSET + 1),
           "combine.egs": np.concatenate([
               _subset(valid, opts.num_valid_frames_combine // fpe, opts.srand, _SUBSET + 2),
               _subset(train, opts.num_train_frames_combine // fpe, opts.srand, _SUBSET + 3)])}
    for name, records in out.items():
        if not len(records):
            raise NnetError(f"{where}/{name}: no examples (valid utterances gave {len(valid)} egs, train-subset "
                            f"utterances {len(train)}; check --num-frames-diagnostic, "
                            f"--num-train-frames-combine and --frames-per-eg {fpe})")
    return out


def _refuse_stdin(rspecifier):
    if rspecifier.split(":", 1)[-1].strip() == "-":
        raise NnetError(f"{rspecifier}: targets are read twice (a cheap counting pass, then by key), so they "
                        f"cannot come from stdin; write them to a file first")


def get_egs(feats_rspecifier, targets_rspecifier, egs_dir, opts, cmvn=None):
    """Write egs.{1..A}.ark, the diagnostic/combine egs, the utterance lists and info/ to egs_dir.

    ``cmvn`` (a data.cmvn.CmvnApplier) normalises each utterance's features first; what was
    applied is recorded as apply-cmvn options in cmvn_opts and info/cmvn_opts
    ("--norm-means=false" when nothing was). Returns the info values as a dict."""
    opts.check()
    _refuse_stdin(targets_rspecifier)
    lengths, max_id = scan_targets(targets_rspecifier, opts.num_targets)
    if not lengths:
        raise NnetError(f"{targets_rspecifier}: no utterances with targets")
    keys = list(lengths)
    valid, subset = split_utterances(keys, opts.num_utts_subset, opts.srand, targets_rspecifier)
    roles = {keys[i]: VALID for i in valid} | {keys[i]: SUBSET for i in subset}
    fpe = opts.frames_per_eg
    num_frames_est = sum(n for i, n in enumerate(lengths.values()) if i not in valid)
    num_archives = num_frames_est // (fpe * opts.samples_per_iter) + 1
    if num_archives == 1:
        logger.warning("the --frames-per-eg is too large to generate one archive with as many as "
                       "--samples-per-iter egs in it (only one archive). Consider reducing --frames-per-eg.")
    os.makedirs(os.path.join(egs_dir, "info"), exist_ok=True)
    # A stale num_archives would make this run, if interrupted, look complete.
    stale = os.path.join(egs_dir, "info", "num_archives")
    if os.path.exists(stale):
        os.unlink(stale)
    tmpdir = tempfile.mkdtemp(prefix=".tmp-get-egs.", dir=egs_dir)
    try:
        dumper = _Dumper(keys, roles, num_archives, tmpdir, opts)
        dumper.run(feats_rspecifier, targets_rspecifier, cmvn)
        if not dumper.train_egs:
            raise NnetError(f"{feats_rspecifier}: no training examples: {dumper.done} utterances gave egs "
                            f"(none outside valid_uttlist), {dumper.errors} had no usable targets")
        subsets = _subsets(dumper, opts, egs_dir)
        _write_archives(dumper, egs_dir, opts)
        for name, records in subsets.items():
            _write(os.path.join(egs_dir, name), records, slice(None), keys, opts)
            logger.info(f"Wrote {len(records)} egs to {os.path.join(egs_dir, name)}")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    for name, chosen in (("valid_uttlist", valid), ("train_subset_uttlist", subset)):
        write_text(os.path.join(egs_dir, name), "".join(f"{keys[i]}\n" for i in sorted(chosen)))
    # Kaldi keeps cmvn_opts at the top of the egs dir (the training script copies it on); ours is
    # a complete apply-cmvn option string, so decoding can pass it on as it is.
    cmvn_opts = cmvn.opts() if cmvn is not None else format_cmvn_opts(False, False)
    write_text(os.path.join(egs_dir, "cmvn_opts"), f"{cmvn_opts}\n")
    info = {"frames_per_eg": fpe, "feat_dim": dumper.feat_dim, "left_context": opts.left_context,
            "right_context": opts.right_context, "num_frames": dumper.train_frames,
            "egs_per_archive": dumper.train_frames // (fpe * num_archives),
            "output_dim": opts.num_targets if opts.num_targets is not None else max_id + 1,
            "cmvn_opts": cmvn_opts,
            "num_archives": num_archives}  # last: its presence marks a complete egs dir
    for name, value in info.items():
        write_text(os.path.join(egs_dir, "info", name), f"{value}\n")
    logger.info(f"Wrote {num_archives} archives of about {info['egs_per_archive']} egs each to {egs_dir}: "
                f"{dumper.train_egs} training egs covering {dumper.train_frames} labelled frames "
                f"({fpe} frames per eg); {dumper.errors} utterances skipped")
    return info


def _write_archives(dumper, egs_dir, opts):
    """Load, shuffle (nnet3-shuffle-egs --srand=k+srand) and write one archive at a time."""
    for k in range(1, dumper.num_archives + 1):
        records = dumper.spools.load(k - 1)
        if not len(records):
            logger.warning(f"{egs_dir}/egs.{k}.ark: no examples (too few egs for {dumper.num_archives} "
                           f"archives; consider a larger --samples-per-iter)")
        order = _rng(k + opts.srand, _SHUFFLE).permutation(len(records))
        _write(os.path.join(egs_dir, f"egs.{k}.ark"), records, order, dumper.keys, opts)
        del records
        dumper.spools.remove(k - 1)
        logger.debug(f"Wrote {egs_dir}/egs.{k}.ark")
