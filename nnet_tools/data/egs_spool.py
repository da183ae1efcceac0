"""The streaming pass of an egs dump: each utterance's features cut into egs (fixed-size records)
that are scattered at random over the archives (nnet3-copy-egs --random) and appended to one
spool file per archive, and per pool of valid and train-subset egs, through a bounded buffer."""
import os

import numpy as np

from nnet_tools.data.egs_plan import STREAM_SCATTER, SUBSET, TRAIN, VALID, rng
from nnet_tools.data.tables import RandomAccessIntVectors, read_matrices
from nnet_tools.errors import NnetError
from nnet_tools.fileio import writing
from nnet_tools.log import logger

MAX_WARNINGS = 10  # per-utterance warnings printed before they are only counted


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

    def __init__(self, directory, num_buckets, dtype, buffer_bytes, names=None):
        self.dtype, self.buffer_bytes = dtype, buffer_bytes
        self.paths = [os.path.join(directory, name) for name in (names or [f"{b}.rec" for b in range(num_buckets)])]
        for path in self.paths:   # a killed earlier run's pieces must not be appended to
            if os.path.exists(path):
                os.unlink(path)
        self.counts = [0] * num_buckets
        self._buffers = [[] for _ in range(num_buckets)]
        self._buffered = 0

    def add(self, bucket, records):
        self._buffers[bucket].append(records)
        self.counts[bucket] += len(records)
        self._buffered += records.nbytes
        if self._buffered > self.buffer_bytes:
            self.flush()

    def flush(self):
        for path, buffer in zip(self.paths, self._buffers):
            if buffer:
                with writing(path), open(path, "ab") as f:
                    for records in buffer:
                        f.write(np.ascontiguousarray(records).data)   # tofile() loses a short write's error
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


def piece_names(job, num_archives):
    """Spool names of job ``job``: one piece per archive, then its valid and train-subset pools."""
    return [f"egs_orig.{job}.{k}.rec" for k in range(1, num_archives + 1)] + [f"valid.{job}.rec", f"subset.{job}.rec"]


class Dumper:
    """The streaming pass: features in, egs spooled by archive (training) or pool (valid, subset)."""

    def __init__(self, keys, roles, num_archives, tmpdir, opts, buffer_bytes, job=None):
        self.keys, self.roles, self.opts, self.buffer_bytes = keys, roles, opts, buffer_bytes
        self.index = {k: i for i, k in enumerate(keys)}
        self.num_archives, self.tmpdir, self.job = num_archives, tmpdir, job
        self.valid_pool, self.subset_pool = num_archives, num_archives + 1
        # nnet3-copy-egs --random --srand: one stream, or per job srand + job as Kaldi's get_egs.sh.
        self.scatter = rng(opts.srand if job is None else opts.srand + job, STREAM_SCATTER)
        self.spools, self.feat_dim, self.used = None, None, set()
        self.done = self.errors = self.egs = self.frames = self.train_egs = self.train_frames = 0
        self.nonfinite_utts = self.nonfinite_frames = 0

    def skip(self, message):
        self.errors += 1
        if self.errors <= MAX_WARNINGS:
            logger.warning(message + ("" if self.errors < MAX_WARNINGS else
                                      " (further per-utterance warnings are only counted)"))

    def run(self, feats_rspecifier, targets_rspecifier, cmvn=None, beat=None):
        """``beat`` (a lock's heartbeat) is called once per utterance."""
        with RandomAccessIntVectors(targets_rspecifier) as targets:
            for key, feats in read_matrices(feats_rspecifier):
                if beat:
                    beat()
                if key not in targets or key not in self.index:
                    self.skip(f"No targets for key {key}")
                    continue
                if cmvn is not None:
                    feats = cmvn(key, feats)  # Kaldi's get_egs.sh pipes the features through apply-cmvn
                ids = targets[key]
                if feats.shape[0] == 0:
                    self.skip(f"Empty feature matrix for utterance {key}")
                    continue
                if abs(len(ids) - feats.shape[0]) > self.opts.targets_length_tolerance:
                    self.skip(f"Targets do not have expected length for utterance {key}: expected length = "
                              f"{feats.shape[0]}, got {len(ids)} (--targets-length-tolerance "
                              f"{self.opts.targets_length_tolerance})")
                    continue
                if self.nonfinite(key, feats, feats_rspecifier):
                    continue
                self.add(key, feats, ids, feats_rspecifier)
        if self.spools is not None:
            self.spools.flush()
        # Kaldi's wording (nnet3-get-egs), double space included.
        logger.info(f"Finished generating examples, successfully processed {self.done} feature files, wrote "
                    f"{self.egs} examples,  with {self.frames} egs in total; {self.errors} files had errors.")
        if self.errors:
            logger.warning(f"{self.errors} utterances had errors and could not be processed.")
        if self.nonfinite_utts:
            logger.warning(f"Skipped {self.nonfinite_utts} utterances with {self.nonfinite_frames} frames of "
                           f"NaN or infinite features (--allow-nonfinite).")

    def nonfinite(self, key, feats, where):
        """NaN/inf in an utterance's features: an error naming it, or (--allow-nonfinite) skip it.

        Left in, one such frame makes every job that trains on it, and the average, NaN."""
        bad = ~np.isfinite(feats).all(axis=1)
        if not bad.any():
            return False
        count, first = int(bad.sum()), int(np.argmax(bad))
        what = (f"{where}: utterance '{key}': {count} of {feats.shape[0]} frames have NaN or infinite "
                f"features (first: frame {first})")
        if not self.opts.allow_nonfinite:
            raise NnetError(what + "; fix the features, or skip such utterances with --allow-nonfinite")
        self.nonfinite_utts += 1
        self.nonfinite_frames += count
        self.skip(what + "; skipping it")
        return True

    def add(self, key, feats, ids, where):
        if self.spools is None:
            self.feat_dim = feats.shape[1]
            names = None if self.job is None else piece_names(self.job, self.num_archives)
            self.spools = Spools(self.tmpdir, self.num_archives + 2, record_dtype(self.opts, self.feat_dim),
                                 self.buffer_bytes, names)
        elif feats.shape[1] != self.feat_dim:
            raise NnetError(f"{where}: utterance '{key}': feature dim {feats.shape[1]} differs from "
                            f"{self.feat_dim} of the utterances before it")
        inputs, labels, t0 = cut_utterance(feats, ids, self.opts)
        records = np.empty(len(t0), self.spools.dtype)
        records["inputs"], records["labels"], records["utt"], records["t0"] = inputs, labels, self.index[key], t0
        self.used.add(self.index[key])
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
