"""One training job of one iteration (Kaldi's nnet3-train on one archive).

The objective is the log-likelihood summed over frames, maximised by SGD (optionally with
momentum) whose step is the learning rate times the (natural-)gradient, limited per component by
max-change and globally by max-param-change, exactly as Kaldi's trainer does.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch

from nnet_tools.train import max_change
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.train.minibatch import MinibatchRule, buffered_order


@dataclass
class TrainOptions:
    learning_rate: float
    frame: int = 0
    minibatch_size: str = "512"
    momentum: float = 0.0
    max_param_change: float = 2.0
    shuffle_buffer_size: int = 5000
    srand: int = 0
    print_interval: int = 10


def minibatches(archive, opts, left, right, device):
    """Yield (windows, labels) minibatches of the archive's label position ``opts.frame``."""
    if not 0 <= opts.frame < archive.frames_per_eg:
        raise NnetError(f"{archive.path}: --frame {opts.frame} out of range (frames-per-eg {archive.frames_per_eg})")
    have = np.nonzero(archive.labels[:, opts.frame] >= 0)[0]
    order = have[buffered_order(len(have), opts.shuffle_buffer_size, np.random.default_rng(opts.srand))]
    sizes, discarded = MinibatchRule(opts.minibatch_size).plan(len(order), left + 1 + right)
    logger.info(f"Processing {len(order)} egs into {len(sizes)} minibatches, discarding "
                f"{100.0 * discarded / max(1, len(order)):.2f}% of egs.")
    start = 0
    for size in sizes:
        index = np.sort(order[start:start + size])  # sorted reads are kinder to the memory map
        start += size
        labels = torch.from_numpy(archive.labels[index, opts.frame].astype(np.int64))
        yield (archive.windows(index, opts.frame, left, right).to(device, non_blocking=True),
               labels.to(device, non_blocking=True))


def _check_finite(objf, archive, mb):
    """A NaN or infinite objective fails the job: its model would poison the average."""
    if not math.isfinite(objf):
        raise NnetError(f"{archive.path}: minibatch {mb}: objective function is {objf} (non-finite): "
                        f"training diverged (learning rate too high?) or the egs hold NaN/inf; "
                        f"not writing a model")


def train_one_job(model, archive, opts, device="cpu"):
    """Train ``model`` in place on one archive; returns (objective per frame, frames)."""
    left, right = model.left_context, model.right_context
    archive.check_model(model)
    torch.manual_seed(opts.srand)
    model.to(device).train()
    model.reset_natural_gradient()
    components = [(a, [a.weight, a.bias]) for _, a in model.updatable()]
    names = [name for name, _ in model.updatable()]
    momentum_deltas = None
    tot_objf = tot_frames = interval_objf = interval_frames = 0.0
    clipped = torch.zeros(len(components))
    global_clipped = num_minibatches = 0
    for mb, (x, y) in enumerate(minibatches(archive, opts, left, right, device)):
        model.zero_grad(set_to_none=True)
        objf = model(x).gather(1, y.unsqueeze(1)).sum()
        try:
            (-objf).backward()
        except NnetError as e:   # natural gradient on non-finite values; say which came first
            _check_finite(objf.item(), archive, mb)
            raise NnetError(f"{archive.path}: minibatch {mb}: {e}") from None
        # delta = lr * d(objf)/d(param), per component and its learning-rate factor.
        deltas = [[p.grad * (-opts.learning_rate * a.learning_rate_factor) for p in ps] for a, ps in components]
        if opts.momentum:
            if momentum_deltas is not None:
                for ds, olds in zip(deltas, momentum_deltas):
                    for d, old in zip(ds, olds):
                        d.add_(old, alpha=opts.momentum)
        result = max_change.apply_update(components, deltas, opts.max_param_change, scale=1.0 - opts.momentum)
        if not result.applied:
            logger.warning("Infinite parameter change, will not apply.")
        momentum_deltas = deltas if (opts.momentum and result.applied) else None
        clipped += (result.factors < 1).float()
        global_clipped += result.global_factor < 1
        num_minibatches += 1
        objf, frames = objf.item(), y.shape[0]
        _check_finite(objf, archive, mb)
        tot_objf += objf
        tot_frames += frames
        interval_objf += objf
        interval_frames += frames
        if (mb + 1) % opts.print_interval == 0:
            logger.info(f"Average objective function for 'output' for minibatches {mb + 1 - opts.print_interval}-{mb} "
                        f"is {interval_objf / interval_frames:.6g} over {int(interval_frames)} frames.")
            interval_objf = interval_frames = 0.0
    if tot_frames == 0:
        raise NnetError(f"{archive.path}: no egs to train on at frame {opts.frame} (minibatch size {opts.minibatch_size})")
    average = tot_objf / tot_frames
    bad = model.nonfinite()
    if bad:
        raise NnetError(f"{archive.path}: parameters became non-finite (NaN or inf) in {', '.join(bad)}: "
                        f"training diverged; not writing a model")
    logger.info(f"Overall average objective function for 'output' is {average:.6g} over {int(tot_frames)} frames.")
    logger.info(f"[this line is to be parsed by a script:] log-prob-per-frame={average:.6g}")
    for name, count in zip(names, clipped.tolist()):
        logger.info(f"For {name}, per-component max-change was enforced {100.0 * count / num_minibatches:.2f} % of the time.")
    logger.info(f"The global max-change was enforced {100.0 * global_clipped / num_minibatches:.2f} % of the time.")
    return average, int(tot_frames)
