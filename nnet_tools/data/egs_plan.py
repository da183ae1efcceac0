"""What an egs dump derives from the targets alone, alike in every dump job: the utterances and
their frame counts (a cheap first pass), which are held out (valid_uttlist) or also kept as a
training subset (train_subset_uttlist), and the number of archives; and the seeded random
streams every part of the dump draws from."""
from dataclasses import dataclass

import numpy as np

from nnet_tools.data.egs import MAX_TARGETS
from nnet_tools.data.tables import read_int_vectors
from nnet_tools.errors import NnetError
from nnet_tools.log import logger

TRAIN, VALID, SUBSET = 0, 1, 2  # utterance roles; SUBSET utterances are also training data
# Independent random streams (STREAM_SUBSET..+3).
STREAM_SELECT, STREAM_SCATTER, STREAM_SHUFFLE, STREAM_SUBSET = 0, 1, 2, 3


def rng(seed, stream):
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
    perm = rng(srand, STREAM_SELECT).permutation(n)
    return set(perm[:num_utts_subset].tolist()), set(perm[num_utts_subset:2 * num_utts_subset].tolist())


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


def uttlists(plan):
    """valid_uttlist and train_subset_uttlist: the utterances' names, in table order."""
    return {name: [plan.keys[i] for i in sorted(chosen)]
            for name, chosen in (("valid_uttlist", plan.valid), ("train_subset_uttlist", plan.subset))}
