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

This module holds the options and both forms' entry points; the parts they share are
egs_plan (what the targets alone decide: utterance roles, the archive count, the seeds),
egs_spool (the streaming pass: features cut into egs records, spooled by archive) and egs_dir
(the egs dir's files from those records: archives, subsets, utterance lists, info/).
"""
import contextlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from nnet_tools.data.egs_dir import by_utterance, draw_subsets, finish_egs_dir, write_archive
from nnet_tools.data.egs_plan import make_plan, uttlists
from nnet_tools.data.egs_spool import Dumper, cut_utterance, piece_names, record_dtype
from nnet_tools.dir_lock import DirLock
from nnet_tools.errors import NnetError
from nnet_tools.fileio import check_writable, make_dirs, output_dir, pid_alive, temp_dir, write_error, write_text
from nnet_tools.log import logger

__all__ = ["EgsOptions", "get_egs", "dump_job", "merge_archive", "finish", "cut_utterance", "egs_lock",
           "take_lock", "release_lock"]

SPOOL_BUFFER_BYTES = 16 << 20  # egs held in memory before the spool files are appended to
WRITE_CHUNK_BYTES = 8 << 20    # egs gathered at a time when an archive is written
LOCK_NAME = "get_egs.lock"     # EGS_DIR's owner: one get_egs.sh (or one-process nnet-get-egs) at a time
HEARTBEAT_S = 60.0             # how often a holder freshens the lock's mtime


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


def _writable_dir(directory):
    """Make ``directory`` and check this process can write in it, as one line."""
    try:
        make_dirs(directory)
    except OSError as e:  # e.g. it is a file
        raise write_error(directory, e) from None
    check_writable(directory)


def _start(egs_dir):
    """Make EGS_DIR (its scratch space lives there); info/ waits for finish_egs_dir, so that a
    failed run leaves no empty info/ behind."""
    _writable_dir(egs_dir)
    check_writable(os.path.join(egs_dir, "info"))   # before anything of an earlier run goes


def _invalidate(egs_dir, num_archives):
    """Remove an earlier run's info/num_archives just before its first file is replaced: it
    would make this run, if interrupted, look complete. Until then the earlier dir stays whole.
    Its archives past this run's ``num_archives`` go too: they would be mixed into this run's."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(egs_dir, "info", "num_archives"))
    for name in os.listdir(egs_dir):
        m = re.fullmatch(r"egs\.(\d+)\.ark", name)
        if m and int(m.group(1)) > num_archives:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(egs_dir, name))


def egs_lock(egs_dir, pid=None):
    """EGS_DIR's lock (the exp dir's kind: host, pid, heartbeat); ``pid`` holds it for that process."""
    return DirLock(egs_dir, LOCK_NAME, "another get_egs is writing this egs dir", pid=pid)


def take_lock(egs_dir, pid):
    """Take EGS_DIR's lock for process ``pid`` (steps/get_egs.sh's shell) and leave it held."""
    # A lock for no running process would be judged by its heartbeat alone, which no one beats.
    if not pid_alive(pid):
        why = "not a process id" if pid <= 0 else "no running process has that id"
        raise NnetError(f"{os.path.join(egs_dir, LOCK_NAME)}: cannot take it for pid {pid}: {why}")
    _writable_dir(egs_dir)
    egs_lock(egs_dir, pid).acquire()


def release_lock(egs_dir, pid):
    """Release EGS_DIR's lock if process ``pid`` holds it (a dead one's too: a shell's exit trap)."""
    if pid <= 0:
        raise NnetError(f"{os.path.join(egs_dir, LOCK_NAME)}: cannot release it for pid {pid}: "
                        f"not a process id, so it can never have been taken")
    egs_lock(egs_dir, pid).release()


def get_egs(feats_rspecifier, targets_rspecifier, egs_dir, opts, cmvn=None, lock=True):
    """Write egs.{1..A}.ark, the diagnostic/combine egs, the utterance lists and info/ to egs_dir.

    ``cmvn`` (a data.cmvn.CmvnApplier) normalises each utterance's features first; what was
    applied is recorded as apply-cmvn options in cmvn_opts and info/cmvn_opts
    ("--norm-means=false" when nothing was). Holds EGS_DIR's lock throughout (``lock=False``:
    the caller holds it, as steps/get_egs.sh does). Returns the info values as a dict."""
    opts.check()
    plan = make_plan(targets_rspecifier, opts)
    # A dir this run made goes again if it fails; one that existed (get_egs.sh's, locked) stays.
    with output_dir(egs_dir):
        _start(egs_dir)
        with egs_lock(egs_dir) if lock else contextlib.nullcontext() as held:
            return _get_egs(plan, feats_rspecifier, targets_rspecifier, egs_dir, opts, cmvn, held)


def _get_egs(plan, feats_rspecifier, targets_rspecifier, egs_dir, opts, cmvn, held):
    with temp_dir(egs_dir, "get-egs") as tmpdir:
        dumper = Dumper(plan.keys, plan.roles, plan.num_archives, tmpdir, opts, SPOOL_BUFFER_BYTES)
        dumper.run(feats_rspecifier, targets_rspecifier, cmvn, held and (lambda: held.beat(HEARTBEAT_S)))
        if not dumper.train_egs:
            raise NnetError(f"{feats_rspecifier}: no training examples: {dumper.done} utterances gave egs "
                            f"(none outside valid_uttlist), {dumper.errors} had no usable targets")
        spools = dumper.spools
        _invalidate(egs_dir, plan.num_archives)
        subsets = draw_subsets(by_utterance([spools.load(dumper.valid_pool)]),
                               by_utterance([spools.load(dumper.subset_pool)]), opts, egs_dir)
        for k in range(1, plan.num_archives + 1):
            write_archive(egs_dir, k, [spools.load(k - 1)], plan.keys, opts, dumper.feat_dim, plan.num_archives,
                          WRITE_CHUNK_BYTES)
            spools.remove(k - 1)
        counts = {"feat_dim": dumper.feat_dim, "train_egs": dumper.train_egs, "train_frames": dumper.train_frames,
                  "errors": dumper.errors}
        return finish_egs_dir(egs_dir, plan.num_archives, plan.max_id, opts, subsets, plan.keys, counts,
                              cmvn.opts() if cmvn is not None else None, uttlists(plan), WRITE_CHUNK_BYTES)


# --- the parallel form ------------------------------------------------------------------------

ORIG = "orig"   # EGS_DIR/orig: the jobs' pieces and their summaries, removed by finish()
SUMMARY_KEYS = ("job", "num_jobs", "options", "num_archives", "max_id", "uttlists", "feat_dim", "counts",
                "train_egs", "train_frames", "errors", "cmvn_opts", "keys")  # what a job's summary holds


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
    dumper = Dumper(plan.keys, plan.roles, plan.num_archives, orig, opts, SPOOL_BUFFER_BYTES, job)
    dumper.run(feats_rspecifier, targets_rspecifier, cmvn)
    counts = [0] * (plan.num_archives + 2) if dumper.spools is None else dumper.spools.counts
    write_text(os.path.join(orig, "num_archives"), f"{plan.num_archives}\n")
    write_text(summary, json.dumps({
        "job": job, "num_jobs": num_jobs, "options": asdict(opts), "num_archives": plan.num_archives,
        "max_id": plan.max_id, "uttlists": uttlists(plan),
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
    _invalidate(egs_dir, num_archives)
    write_archive(egs_dir, k, pieces, keys, opts, feat_dim, num_archives, WRITE_CHUNK_BYTES)
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
    valid = by_utterance(_pieces(egs_dir, summaries, num_archives, feat_dim, opts))
    train = by_utterance(_pieces(egs_dir, summaries, num_archives + 1, feat_dim, opts))
    subsets = draw_subsets(valid, train, opts, egs_dir)
    counts = {"feat_dim": feat_dim, "train_egs": train_egs, "errors": sum(s["errors"] for s in summaries),
              "train_frames": sum(s["train_frames"] for s in summaries)}
    info = finish_egs_dir(egs_dir, num_archives, first["max_id"], opts, subsets, keys, counts, first["cmvn_opts"],
                          first["uttlists"], WRITE_CHUNK_BYTES)
    shutil.rmtree(os.path.join(egs_dir, ORIG), ignore_errors=True)
    return info
