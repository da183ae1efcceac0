"""Minibatching of a job's egs as nnet3-shuffle-egs | nnet3-merge-egs do it.

The ``--minibatch-size`` string is Kaldi's: ``512``; ``256,128,64`` or ``16:32,64`` (allowed sizes
and ranges); ``128=64:128,256/256=32:64,128`` (rules chosen by eg size, the closest rule applies).
While input continues only the largest allowed size is emitted; at the end the leftovers are
emitted with the largest allowed size that fits, and what is left after that is discarded.
"""
import re

import numpy as np

from nnet_tools.errors import NnetError


def _parse_sizes(text, where):
    sizes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", item)
        if not m:
            raise NnetError(f"{where}: bad minibatch size {item!r} in {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo <= 0 or hi < lo:
            raise NnetError(f"{where}: bad minibatch range {item!r} in {text!r}")
        sizes.append((lo, hi))
    return sizes


class MinibatchRule:
    def __init__(self, text, where="--minibatch-size"):
        self.text = text
        self.rules = []  # (eg_size or None, [(lo, hi), ...])
        for part in str(text).split("/"):
            if "=" in part:
                eg_size, sizes = part.split("=", 1)
                if not eg_size.strip().isdigit():
                    raise NnetError(f"{where}: bad eg size {eg_size!r} in {text!r}")
                self.rules.append((int(eg_size), _parse_sizes(sizes, where)))
            else:
                self.rules.append((None, _parse_sizes(part, where)))
        if len(self.rules) > 1 and any(size is None for size, _ in self.rules):
            raise NnetError(f"{where}: with several '/'-separated rules each needs 'egsize=' ({text!r})")

    def sizes_for(self, eg_size):
        return min(self.rules, key=lambda r: abs((r[0] or eg_size) - eg_size))[1]

    def plan(self, num_egs, eg_size):
        """Minibatch sizes for ``num_egs`` egs, and how many egs are discarded."""
        sizes = self.sizes_for(eg_size)
        largest = max(hi for _, hi in sizes)
        full, left = divmod(num_egs, largest)
        plan = [largest] * full
        while left:
            fits = [min(hi, left) for lo, hi in sizes if lo <= left]
            if not fits:
                break
            plan.append(max(fits))
            left -= plan[-1]
        return plan, left


def halve(text):
    """Kaldi's halve_minibatch_size_str: every size integer //2, minimum 1 (iteration 0)."""
    def half(m):
        return str(max(1, int(m.group(0)) // 2))
    return "/".join(
        (p.split("=", 1)[0] + "=" + re.sub(r"\d+", half, p.split("=", 1)[1])) if "=" in p else re.sub(r"\d+", half, p)
        for p in str(text).split("/"))


def buffered_order(n, buffer_size, rng):
    """nnet3-shuffle-egs with --buffer-size: each incoming eg lands in a random slot of a
    ``buffer_size`` table, writing out the eg it evicts; the table is flushed at the end.
    ``buffer_size`` 0 means a full shuffle."""
    if buffer_size <= 0 or buffer_size >= n:
        return rng.permutation(n)
    slots = np.arange(buffer_size)
    out = np.empty(n, dtype=np.int64)
    picks = rng.integers(0, buffer_size, size=n - buffer_size)
    written = 0
    for i, slot in zip(range(buffer_size, n), picks.tolist()):
        out[written] = slots[slot]
        slots[slot] = i
        written += 1
    out[written:] = slots
    return out
