"""Egs dumping: features + per-frame targets -> an egs dir (Kaldi's steps/nnet3/get_egs.sh around
nnet3-get-egs, nnet3-copy-egs --random, nnet3-shuffle-egs and nnet3-subset-egs, as one program).

Memory does not grow with the data: a cheap first pass over the targets gives the utterance list
and frame count (hence the archive count); the features are then streamed once, each utterance cut
into egs that are appended to per-archive spool files on disk; finally each archive is shuffled
and written in chunks, gathered from its memory-mapped spool (page cache, not process memory).
Seeds follow Kaldi: utterance lists and scattering from --srand, archive k (1-based) shuffled with
seed k + srand.

Parallel form (Kaldi's get_egs.sh --nj): job j of N (``dump_job``) reads its split of the features,
scatters its egs to every archive with seed srand + j into EGS_DIR/orig/egs_orig.j.k.rec; then
``merge_archive`` (one task per archive, nnet3-shuffle-egs) concatenates the N pieces of archive k
and shuffles them with seed k + srand; ``finish`` writes the diagnostic and combine subsets (drawn
from the valid and train-subset egs sorted by utterance, so the same as the one-process path's)
and info/. The union of the archives is the same egs multiset for any N.
"""
import contextlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from nnet_tools.data.cmvn import format_cmvn_opts
from nnet_tools.data.egs import MAX_TARGETS, ArchiveWriter
from nnet_tools.errors import NnetError
from nnet_tools.fileio import check_writable, make_dirs, temp_dir, write_error, write_text, writing
from nnet_tools.log import logger
from nnet_tools.data.tables import RandomAccessIntVectors, read_int_vectors, read_matrices

SPOOL_BUFFER_BYTES = 16 << 20  # egs held in memory before the spool files are appended to
WRITE_CHUNK_BYTES = 8 << 20    # egs gathered at a time when an archive is written
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
    allow_nonfinite: bool = False
    compress: bool = False

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
            if num_targets is None and hi >= MAX_TARGETS:  # an output layer that wide would not fit in memory
                raise NnetError(f"{rspecifier}: utterance '{key}': target id {hi} is implausibly large "
                                f"(>= {MAX_TARGETS}); pass --num-targets if it is meant")
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

    def __init__(self, directory, num_buckets, dtype, names=None):
        self.dtype = dtype
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
        if self._buffered > SPOOL_BUFFER_BYTES:
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


class _Dumper:
    """The streaming pass: features in, egs spooled by archive (training) or pool (valid, subset)."""

    def __init__(self, keys, roles, num_archives, tmpdir, opts, job=None):
        self.keys, self.roles, self.opts = keys, roles, opts
        self.index = {k: i for i, k in enumerate(keys)}
        self.num_archives, self.tmpdir, self.job = num_archives, tmpdir, job
        self.valid_pool, self.subset_pool = num_archives, num_archives + 1
        # nnet3-copy-egs --random --srand: one stream, or per job srand + job as Kaldi's get_egs.sh.
        self.scatter = _rng(opts.srand if job is None else opts.srand + job, _SCATTER)
        self.spools, self.feat_dim, self.used = None, None, set()
        self.done = self.errors = self.egs = self.frames = self.train_egs = self.train_frames = 0
        self.nonfinite_utts = self.nonfinite_frames = 0

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
            self.spools = Spools(self.tmpdir, self.num_archives + 2, record_dtype(self.opts, self.feat_dim),
                                 None if self.job is None else piece_names(self.job, self.num_archives))
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


class _Concat:
    """Record arrays (memory maps) read as one, gathered by index a chunk at a time."""

    def __init__(self, parts):
        self.parts = [p for p in parts if len(p)]
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self):
        return int(self.offsets[-1])

    def take(self, index, dtype):
        out = np.empty(len(index), dtype)
        part = np.searchsorted(self.offsets, index, side="right") - 1
        for p in np.unique(part):
            mask = part == p
            out[mask] = self.parts[p][index[mask] - self.offsets[p]]
        return out


def _write(path, records, order, keys, opts, feat_dim):
    """Write records[order] (a record array or a _Concat) as an egs archive, a chunk at a time, so
    memory holds one chunk, not the archive; ``keys`` maps utterance indices to names."""
    source = records if isinstance(records, _Concat) else _Concat([records])
    dtype = record_dtype(opts, feat_dim)
    chunk = max(1, WRITE_CHUNK_BYTES // dtype.itemsize)
    with ArchiveWriter(path, len(order), feat_dim, opts.frames_per_eg, opts.left_context, opts.right_context,
                       opts.compress) as writer:
        for i in range(0, len(order), chunk):
            part = source.take(np.asarray(order[i:i + chunk]), dtype)
            writer.write(part["inputs"], part["labels"],
                         [f"{keys[u]}-{t}" for u, t in zip(part["utt"].tolist(), part["t0"].tolist())])


def _subset(records, n, seed, stream):
    """nnet3-subset-egs: n random egs (all if fewer), in random order."""
    return records[_rng(seed, stream).permutation(len(records))[:n]]


def _by_utterance(pools):
    """Pool record arrays concatenated and sorted by (utterance index, first frame): an order that
    does not depend on how the features were split between jobs."""
    records = np.concatenate([np.asarray(p) for p in pools]) if pools else np.zeros(0)
    return records[np.lexsort((records["t0"], records["utt"]))] if len(records) else records


def _subsets(valid, train, opts, where):
    """valid_diagnostic, train_diagnostic and combine (= valid_combine ++ train_combine) records."""
    fpe = opts.frames_per_eg
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


@dataclass
class Plan:
    """What every job derives alike from the targets: utterances, their roles, the archive count."""
    keys: list
    valid: set
    subset: set
    roles: dict
    num_archives: int
    max_id: int


def make_plan(targets_rspecifier, opts, warn=True):
    _refuse_stdin(targets_rspecifier)
    lengths, max_id = scan_targets(targets_rspecifier, opts.num_targets)
    if not lengths:
        raise NnetError(f"{targets_rspecifier}: no utterances with targets")
    keys = list(lengths)
    valid, subset = split_utterances(keys, opts.num_utts_subset, opts.srand, targets_rspecifier)
    roles = {keys[i]: VALID for i in valid} | {keys[i]: SUBSET for i in subset}
    num_frames_est = sum(n for i, n in enumerate(lengths.values()) if i not in valid)
    num_archives = num_frames_est // (opts.frames_per_eg * opts.samples_per_iter) + 1
    if num_archives == 1 and warn:
        logger.warning("the --frames-per-eg is too large to generate one archive with as many as "
                       "--samples-per-iter egs in it (only one archive). Consider reducing --frames-per-eg.")
    return Plan(keys, valid, subset, roles, num_archives, max_id)


def _writable_dir(directory):
    """Make ``directory`` and check this process can write in it, as one line."""
    try:
        make_dirs(directory)
    except OSError as e:  # e.g. it is a file
        raise write_error(directory, e) from None
    check_writable(directory)


def _start(egs_dir):
    """Make EGS_DIR (its scratch space lives there); info/ waits for _finish, so that a failed
    run leaves no empty info/ behind."""
    _writable_dir(egs_dir)
    check_writable(os.path.join(egs_dir, "info"))   # before anything of an earlier run goes


def _invalidate(egs_dir):
    """Remove an earlier run's info/num_archives just before its first file is replaced: it
    would make this run, if interrupted, look complete. Until then the earlier dir stays whole."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(egs_dir, "info", "num_archives"))


def get_egs(feats_rspecifier, targets_rspecifier, egs_dir, opts, cmvn=None):
    """Write egs.{1..A}.ark, the diagnostic/combine egs, the utterance lists and info/ to egs_dir.

    ``cmvn`` (a data.cmvn.CmvnApplier) normalises each utterance's features first; what was
    applied is recorded as apply-cmvn options in cmvn_opts and info/cmvn_opts
    ("--norm-means=false" when nothing was). Returns the info values as a dict."""
    opts.check()
    plan = make_plan(targets_rspecifier, opts)
    _start(egs_dir)
    with temp_dir(egs_dir, "get-egs") as tmpdir:
        dumper = _Dumper(plan.keys, plan.roles, plan.num_archives, tmpdir, opts)
        dumper.run(feats_rspecifier, targets_rspecifier, cmvn)
        if not dumper.train_egs:
            raise NnetError(f"{feats_rspecifier}: no training examples: {dumper.done} utterances gave egs "
                            f"(none outside valid_uttlist), {dumper.errors} had no usable targets")
        spools = dumper.spools
        _invalidate(egs_dir)
        subsets = _subsets(_by_utterance([spools.load(dumper.valid_pool)]),
                           _by_utterance([spools.load(dumper.subset_pool)]), opts, egs_dir)
        for k in range(1, plan.num_archives + 1):
            _write_archive(egs_dir, k, [spools.load(k - 1)], plan.keys, opts, dumper.feat_dim, plan.num_archives)
            spools.remove(k - 1)
        counts = {"feat_dim": dumper.feat_dim, "train_egs": dumper.train_egs, "train_frames": dumper.train_frames,
                  "errors": dumper.errors}
        return _finish(egs_dir, plan.num_archives, plan.max_id, opts, subsets, plan.keys, counts,
                       cmvn.opts() if cmvn is not None else None, _uttlists(plan))


def _uttlists(plan):
    return {name: [plan.keys[i] for i in sorted(chosen)]
            for name, chosen in (("valid_uttlist", plan.valid), ("train_subset_uttlist", plan.subset))}


def _finish(egs_dir, num_archives, max_id, opts, subsets, keys, counts, cmvn_opts, uttlists):
    """Subsets, utterance lists, cmvn_opts and info/ (num_archives last: it marks a complete dir)."""
    for name, records in subsets.items():
        _write(os.path.join(egs_dir, name), records, np.arange(len(records)), keys, opts, counts["feat_dim"])
        logger.info(f"Wrote {len(records)} egs to {os.path.join(egs_dir, name)}")
    for name, utts in uttlists.items():
        write_text(os.path.join(egs_dir, name), "".join(f"{u}\n" for u in utts))
    # Kaldi keeps cmvn_opts at the top of the egs dir (the training script copies it on); ours is
    # a complete apply-cmvn option string, so decoding can pass it on as it is.
    cmvn_opts = cmvn_opts if cmvn_opts is not None else format_cmvn_opts(False, False)
    write_text(os.path.join(egs_dir, "cmvn_opts"), f"{cmvn_opts}\n")
    fpe = opts.frames_per_eg
    info = {"frames_per_eg": fpe, "feat_dim": counts["feat_dim"], "left_context": opts.left_context,
            "right_context": opts.right_context, "num_frames": counts["train_frames"],
            "egs_per_archive": counts["train_frames"] // (fpe * num_archives),
            "output_dim": opts.num_targets if opts.num_targets is not None else max_id + 1,
            "cmvn_opts": cmvn_opts,
            "num_archives": num_archives}  # last: its presence marks a complete egs dir
    for name, value in info.items():
        write_text(os.path.join(egs_dir, "info", name), f"{value}\n")
    logger.info(f"Wrote {num_archives} archives of about {info['egs_per_archive']} egs each to {egs_dir}: "
                f"{counts['train_egs']} training egs covering {counts['train_frames']} labelled frames "
                f"({fpe} frames per eg); {counts['errors']} utterances skipped")
    return info


def _write_archive(egs_dir, k, pieces, keys, opts, feat_dim, num_archives):
    """Shuffle (nnet3-shuffle-egs --srand=k+srand) the concatenated pieces of archive k and write it."""
    records = _Concat(pieces)
    if not len(records):
        logger.warning(f"{egs_dir}/egs.{k}.ark: no examples (too few egs for {num_archives} "
                       f"archives; consider a larger --samples-per-iter)")
    order = _rng(k + opts.srand, _SHUFFLE).permutation(len(records))
    _write(os.path.join(egs_dir, f"egs.{k}.ark"), records, order, keys, opts, feat_dim)
    logger.debug(f"Wrote {egs_dir}/egs.{k}.ark")


# --- the parallel form ------------------------------------------------------------------------

ORIG = "orig"   # EGS_DIR/orig: the jobs' pieces and their summaries, removed by finish()
SUMMARY_KEYS = ("job", "num_jobs", "options", "num_archives", "max_id", "uttlists", "feat_dim", "counts",
                "train_egs", "train_frames", "errors", "cmvn_opts", "keys")  # what a job's summary holds


def piece_names(job, num_archives):
    """Spool names of job ``job``: one piece per archive, then its valid and train-subset pools."""
    return [f"egs_orig.{job}.{k}.rec" for k in range(1, num_archives + 1)] + [f"valid.{job}.rec", f"subset.{job}.rec"]


def dump_job(feats_rspecifier, targets_rspecifier, egs_dir, opts, job, num_jobs, cmvn=None):
    """Job ``job`` (1-based) of ``num_jobs``: its features -> pieces of every archive in EGS_DIR/orig,
    then orig/job.<job>.json (written last: the job's pieces are complete)."""
    opts.check()
    if not 1 <= job <= num_jobs:
        raise NnetError(f"--job {job} is not in 1..--num-jobs {num_jobs}")
    plan = make_plan(targets_rspecifier, opts, warn=job == 1)
    _start(egs_dir)
    orig = os.path.join(egs_dir, ORIG)
    _writable_dir(orig)
    summary = os.path.join(orig, f"job.{job}.json")
    for stale in [summary] + [os.path.join(orig, n) for n in os.listdir(orig) if n.startswith("merged.")]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    dumper = _Dumper(plan.keys, plan.roles, plan.num_archives, orig, opts, job)
    dumper.run(feats_rspecifier, targets_rspecifier, cmvn)
    counts = [0] * (plan.num_archives + 2) if dumper.spools is None else dumper.spools.counts
    write_text(os.path.join(orig, "num_archives"), f"{plan.num_archives}\n")
    write_text(summary, json.dumps({
        "job": job, "num_jobs": num_jobs, "options": asdict(opts), "num_archives": plan.num_archives,
        "max_id": plan.max_id, "uttlists": _uttlists(plan),
        "feat_dim": dumper.feat_dim, "counts": counts, "train_egs": dumper.train_egs,
        "train_frames": dumper.train_frames, "errors": dumper.errors,
        "cmvn_opts": cmvn.opts() if cmvn is not None else None,
        "keys": {str(i): plan.keys[i] for i in sorted(dumper.used)}}) + "\n")
    logger.info(f"Job {job} of {num_jobs}: wrote {dumper.train_egs} training egs to pieces of "
                f"{plan.num_archives} archives in {orig}")


def _jobs(egs_dir):
    """The summaries of every dump job, checked complete and consistent."""
    orig = os.path.join(egs_dir, ORIG)
    try:
        names = [n for n in os.listdir(orig) if n.startswith("job.") and n.endswith(".json")]
    except OSError:
        raise NnetError(f"{orig}: no egs pieces; run nnet-get-egs --num-jobs N --job J first") from None
    summaries = []
    for name in names:
        path = os.path.join(orig, name)
        try:
            with open(path) as f:
                summaries.append(json.load(f))
        except (OSError, ValueError) as e:
            raise NnetError(f"{path}: unreadable job summary ({e})") from None
        if not isinstance(summaries[-1], dict) or not set(SUMMARY_KEYS) <= set(summaries[-1]):
            raise NnetError(f"{path}: not an nnet-get-egs job summary")
    summaries.sort(key=lambda s: s["job"])
    num_jobs = summaries[0]["num_jobs"] if summaries else 0
    done = [s["job"] for s in summaries]
    odd = [s for s in summaries if s["num_jobs"] != num_jobs or not 1 <= s["job"] <= num_jobs]
    if odd:
        raise NnetError(f"{orig}: job.{odd[0]['job']}.json is from a run of {odd[0]['num_jobs']} dump jobs, job.1.json "
                        f"from one of {num_jobs}: remove {orig} and run the dump jobs again")
    if not summaries or done != list(range(1, num_jobs + 1)):
        missing = sorted(set(range(1, num_jobs + 1)) - set(done)) if summaries else "all"
        raise NnetError(f"{orig}: dump jobs {missing} did not finish (no job.<j>.json); re-run them")
    first = summaries[0]
    for s in summaries[1:]:
        for field in ("num_jobs", "options", "num_archives", "max_id", "uttlists", "cmvn_opts"):
            if s[field] != first[field]:
                raise NnetError(f"{orig}/job.{s['job']}.json: {field} differs from job 1's; the jobs were not "
                                f"run with the same options and targets")
        if first["feat_dim"] is not None and s["feat_dim"] not in (None, first["feat_dim"]):
            raise NnetError(f"{orig}/job.{s['job']}.json: feature dim {s['feat_dim']} differs from job 1's "
                            f"{first['feat_dim']}")
    dumped_by = {}   # jobs given the same features would put every eg in twice
    for s in summaries:
        for i, key in s["keys"].items():
            if dumped_by.setdefault(i, s["job"]) != s["job"]:
                raise NnetError(f"{orig}/job.{s['job']}.json: utterance '{key}' was dumped by job {dumped_by[i]} "
                                f"too; each job must read its own split of the features (split_scp.pl)")
    return summaries


def _job_setup(summaries):
    first = summaries[0]
    opts = EgsOptions(**first["options"])
    keys = {}
    for s in summaries:
        keys.update((int(i), k) for i, k in s["keys"].items())
    feat_dim = next((s["feat_dim"] for s in summaries if s["feat_dim"] is not None), None)
    return opts, keys, feat_dim


def _pieces(egs_dir, summaries, bucket, feat_dim, opts):
    dtype = record_dtype(opts, feat_dim)
    out = []
    for s in summaries:
        path = os.path.join(egs_dir, ORIG, piece_names(s["job"], s["num_archives"])[bucket])
        n = s["counts"][bucket]
        size = os.path.getsize(path) if os.path.exists(path) else None
        if n and size is None:
            raise NnetError(f"{path}: missing egs piece of job {s['job']}; run that job again")
        if n and size != n * dtype.itemsize:
            raise NnetError(f"{path}: {size} bytes, expected {n} egs of {dtype.itemsize}")
        try:
            out.append(np.memmap(path, dtype, "r", shape=(n,)) if n else np.zeros(0, dtype))
        except OSError as e:
            raise NnetError(f"{path}: cannot read egs piece of job {s['job']}: {e.strerror}") from None
    return out


def merge_archive(egs_dir, k):
    """Archive k from the jobs' pieces (nnet3-shuffle-egs over egs_orig.*.k): egs.k.ark. Done
    already (a task the queue thought lost, run again): says so and succeeds."""
    if os.path.exists(os.path.join(egs_dir, ORIG, f"merged.{k}")) and os.path.exists(os.path.join(egs_dir, f"egs.{k}.ark")):
        logger.info(f"{egs_dir}/egs.{k}.ark is merged already ({ORIG}/merged.{k}); nothing to do")
        return
    summaries = _jobs(egs_dir)
    opts, keys, feat_dim = _job_setup(summaries)
    num_archives = summaries[0]["num_archives"]
    if not 1 <= k <= num_archives:
        raise NnetError(f"archive {k} is not in 1..{num_archives} (the egs dir's number of archives)")
    if feat_dim is None:
        raise NnetError(f"{egs_dir}: the dump jobs wrote no egs")
    check_writable(os.path.join(egs_dir, ORIG))   # its merged.K marker: else egs.K.ark would be left unmarked
    pieces = _pieces(egs_dir, summaries, k - 1, feat_dim, opts)
    _invalidate(egs_dir)
    _write_archive(egs_dir, k, pieces, keys, opts, feat_dim, num_archives)
    n = sum(len(p) for p in pieces)
    del pieces
    write_text(os.path.join(egs_dir, ORIG, f"merged.{k}"), "")
    for s in summaries:   # as Kaldi's get_egs.sh removes egs_orig.*: the disk holds the data once
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(egs_dir, ORIG, piece_names(s["job"], num_archives)[k - 1]))
    logger.info(f"Shuffled order of {n} neural-network training examples")   # nnet3-shuffle-egs's line
    logger.info(f"Merged {len(summaries)} pieces into {egs_dir}/egs.{k}.ark")


def finish(egs_dir):
    """After every merge_archive: subsets, utterance lists and info/; removes EGS_DIR/orig. Done
    already (no orig/, info/num_archives written): says so and succeeds."""
    if not os.path.isdir(os.path.join(egs_dir, ORIG)) and os.path.exists(os.path.join(egs_dir, "info", "num_archives")):
        logger.info(f"{egs_dir} is finished already (info/num_archives, no {ORIG}/); nothing to do")
        return None
    summaries = _jobs(egs_dir)
    opts, keys, feat_dim = _job_setup(summaries)
    first, num_archives = summaries[0], summaries[0]["num_archives"]
    for directory in (egs_dir, os.path.join(egs_dir, ORIG)):   # the subsets go in one, the other is removed
        check_writable(directory)
    train_egs = sum(s["train_egs"] for s in summaries)
    if not train_egs:
        raise NnetError(f"{egs_dir}: no training examples: the dump jobs' features gave no egs outside "
                        f"valid_uttlist ({sum(s['errors'] for s in summaries)} utterances had no usable targets)")
    missing = [k for k in range(1, num_archives + 1) if not os.path.exists(os.path.join(egs_dir, ORIG, f"merged.{k}"))]
    lost = [k for k in range(1, num_archives + 1) if k not in missing and not os.path.exists(os.path.join(egs_dir, f"egs.{k}.ark"))]
    if lost:   # its pieces went when it was merged: only the dump can make it again
        more = f" (and {len(lost) - 1} more archives)" if len(lost) > 1 else ""
        raise NnetError(f"{egs_dir}/egs.{lost[0]}.ark: merged, then removed{more}; run the dump jobs again")
    if missing:
        raise NnetError(f"{egs_dir}: archives {missing} not merged yet (run nnet-merge-egs {egs_dir} K for each)")
    valid = _by_utterance(_pieces(egs_dir, summaries, num_archives, feat_dim, opts))
    train = _by_utterance(_pieces(egs_dir, summaries, num_archives + 1, feat_dim, opts))
    subsets = _subsets(valid, train, opts, egs_dir)
    counts = {"feat_dim": feat_dim, "train_egs": train_egs, "errors": sum(s["errors"] for s in summaries),
              "train_frames": sum(s["train_frames"] for s in summaries)}
    info = _finish(egs_dir, num_archives, first["max_id"], opts, subsets, keys, counts, first["cmvn_opts"],
                   first["uttlists"])
    shutil.rmtree(os.path.join(egs_dir, ORIG), ignore_errors=True)
    return info
