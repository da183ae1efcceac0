"""One training job of one iteration (Kaldi's nnet3-train on one archive).

The objective is the log-likelihood summed over frames, maximised by SGD (optionally with
momentum) whose step is the learning rate times the (natural-)gradient, limited per component by
max-change and globally by max-param-change, exactly as Kaldi's trainer does. Kaldi's further
options: l2 regularization (each layer's l2-regularize times --l2-regularize-factor) and backstitch
(--backstitch-training-scale/-interval); both are off by default and cost nothing then.
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
    """nnet3-train's options. Defaults are Kaldi's and give plain (natural-gradient) SGD."""
    learning_rate: float
    chunk: bool = True                       # every labelled frame of each eg, in one pass (nnet3)
    frame: int = 0                           # without chunk: the label position (nnet2's --frame scheme)
    minibatch_size: str = "512"
    momentum: float = 0.0
    max_param_change: float = 2.0
    shuffle_buffer_size: int = 5000
    srand: int = 0
    print_interval: int = 10
    l2_regularize_factor: float = 1.0        # x each layer's l2-regularize; the driver passes 1/num_jobs
    backstitch_training_scale: float = 0.0   # alpha; 0 = conventional SGD
    backstitch_training_interval: int = 1    # backstitch every n-th minibatch
    zero_component_stats: bool = True        # start the nonlinearities' statistics from zero
    store_component_stats: bool = True       # accumulate them over this job's frames

    def check(self):
        if not 0 <= self.learning_rate < math.inf:
            raise NnetError(f"--learning-rate must be finite and >= 0, got {self.learning_rate}")
        if not 0 <= self.momentum < 1:
            raise NnetError(f"--momentum must be in [0, 1), got {self.momentum}")
        if not 0 <= self.max_param_change < math.inf:
            raise NnetError(f"--max-param-change must be finite and >= 0 (0: no limit), got {self.max_param_change}")
        if self.shuffle_buffer_size < 0:
            raise NnetError(f"--shuffle-buffer-size must be >= 0 (0: full shuffle), got {self.shuffle_buffer_size}")
        if not 0 <= self.srand < 2 ** 63:
            raise NnetError(f"--srand must be in [0, 2^63), got {self.srand}")
        if self.print_interval < 1:
            raise NnetError(f"--print-interval must be >= 1, got {self.print_interval}")
        if not self.l2_regularize_factor >= 0:
            raise NnetError(f"--l2-regularize-factor must be >= 0, got {self.l2_regularize_factor}")
        if not self.backstitch_training_scale >= 0:
            raise NnetError(f"--backstitch-training-scale must be >= 0, got {self.backstitch_training_scale}")
        if self.backstitch_training_interval < 1:
            raise NnetError(f"--backstitch-training-interval must be >= 1, got {self.backstitch_training_interval}")
        if self.backstitch_training_scale > 0 and self.momentum != 0:
            raise NnetError(f"backstitch training (--backstitch-training-scale {self.backstitch_training_scale}) "
                            f"is incompatible with --momentum {self.momentum}; use --momentum 0")


def minibatches(archive, opts, left, right, device):
    """Yield (windows, labels, frames) minibatches of the archive's label position ``opts.frame``,
    or with ``opts.chunk`` (chunks [B, left + frames-per-eg + right, D], labels [B, frames-per-eg],
    -1 for none) of whole egs; ``frames`` counts the labelled frames, taken from the host's labels
    (no device sync). --minibatch-size counts egs either way, as Kaldi's does."""
    fpe = archive.frames_per_eg
    if opts.chunk:
        have = np.nonzero((archive.labels >= 0).any(axis=1))[0]
        eg_size, what = left + fpe + right, f"egs of {fpe} frames"

        def batch(index):
            labels = archive.labels[index]
            rows = archive.rows(index, archive.left_context - left, eg_size)
            return torch.from_numpy(rows), labels, int((labels >= 0).sum())
    else:
        if not 0 <= opts.frame < fpe:
            raise NnetError(f"{archive.path}: --frame {opts.frame} out of range (frames-per-eg {fpe})")
        have = np.nonzero(archive.labels[:, opts.frame] >= 0)[0]
        eg_size, what = left + 1 + right, "egs"

        def batch(index):
            return archive.windows(index, opts.frame, left, right), archive.labels[index, opts.frame], len(index)
    order = have[buffered_order(len(have), opts.shuffle_buffer_size, np.random.default_rng(opts.srand))]
    sizes, discarded = MinibatchRule(opts.minibatch_size).plan(len(order), eg_size)
    logger.info(f"Processing {len(order)} {what} into {len(sizes)} minibatches, discarding "
                f"{100.0 * discarded / max(1, len(order)):.2f}% of egs.")
    start = 0
    for size in sizes:
        index = np.sort(order[start:start + size])  # sorted reads are kinder to the memory map
        start += size
        x, labels, frames = batch(index)
        yield (x.to(device, non_blocking=True), torch.from_numpy(labels.astype(np.int64)).to(device, non_blocking=True),
               frames)


class _Objective:
    """Kaldi's ObjectiveFunctionInfo for one output name: totals and the per-interval line."""

    def __init__(self, name, print_interval):
        self.name, self.print_interval = name, print_interval
        self.tot_objf = self.tot_frames = self.interval_objf = self.interval_frames = 0.0

    def add(self, mb, objf, frames):
        self.tot_objf += objf
        self.tot_frames += frames
        self.interval_objf += objf
        self.interval_frames += frames
        if (mb + 1) % self.print_interval == 0 and self.interval_frames:
            logger.info(f"Average objective function for '{self.name}' for minibatches {mb + 1 - self.print_interval}-{mb} "
                        f"is {self.interval_objf / self.interval_frames:.6g} over {int(self.interval_frames)} frames.")
            self.interval_objf = self.interval_frames = 0.0

    def log_total(self):
        average = self.tot_objf / self.tot_frames
        logger.info(f"Overall average objective function for '{self.name}' is {average:.6g} over {int(self.tot_frames)} frames.")
        logger.info(f"[this line is to be parsed by a script:] log-prob-per-frame={average:.6g}")
        return average


def _gradients(model, components, x, y, lr, archive, mb):
    """Forward and backward on one minibatch: (objective, per-component gradients, per-component
    coefficients k_c = -lr * learning-rate-factor_c). The delta is k_c times the gradient; it is
    left unscaled so the common case (no momentum, no l2) never copies a gradient."""
    model.zero_grad(set_to_none=True)
    if y.dim() == 1:
        objf = model(x).gather(1, y.unsqueeze(1)).sum()
    else:   # a chunk's every frame, its unlabelled ones (-1) left out of the sum
        picked = model.forward_chunk(x).gather(2, y.clamp(min=0).unsqueeze(2)).squeeze(2)
        objf = picked.masked_fill(y < 0, 0.0).sum()
    try:
        (-objf).backward()
    except NnetError as e:  # natural gradient on non-finite values; say which came first
        _check_finite(objf.item(), archive, mb)
        raise NnetError(f"{archive.path}: minibatch {mb}: {e}") from None
    return objf, [[p.grad for p in ps] for _, ps in components], [-lr * a.learning_rate_factor for a, _ in components]


@torch.no_grad()
def _scaled(grads, coefficients):
    """The deltas k_c * gradient, formed in place in the gradients (which are ours: zero_grad
    sets them to None), for momentum and l2, which add to them."""
    for gs, k in zip(grads, coefficients):
        torch._foreach_mul_(gs, k)
    return grads


@torch.no_grad()
def _add_l2(components, deltas, l2_terms, scale):
    """Kaldi's ApplyL2Regularization: delta_c += scale * coef_c * params_c, outside natural gradient."""
    for c, coef in l2_terms:
        for p, d in zip(components[c][1], deltas[c]):
            d.add_(p, alpha=coef * scale)


def _l2_terms(components, opts):
    """(component index, -2 * factor * lr_c * l2_c) of every component with l2-regularize > 0;
    the minibatch size multiplies it per minibatch."""
    return [(c, -2.0 * opts.l2_regularize_factor * opts.learning_rate * a.learning_rate_factor * a.l2_regularize)
            for c, (a, _) in enumerate(components) if a.l2_regularize > 0 and opts.l2_regularize_factor > 0]


def _rng_state(device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if torch.device(device).type == "cuda" else None)


def _set_rng_state(state, device):
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _log_settings(opts, names, components, l2_terms, phase):
    if l2_terms:
        layers = ", ".join(f"{names[c]}={components[c][0].l2_regularize:g}" for c, _ in l2_terms)
        logger.info(f"l2 regularization with l2-regularize-factor {opts.l2_regularize_factor:g} on: {layers}")
    if opts.backstitch_training_scale > 0:
        logger.info(f"Backstitch training with scale {opts.backstitch_training_scale:g} on the minibatches "
                    f"whose index % {opts.backstitch_training_interval} == {phase}.")


def _check_finite(objf, archive, mb):
    """A NaN or infinite objective fails the job: its model would poison the average."""
    if not math.isfinite(objf):
        raise NnetError(f"{archive.path}: minibatch {mb}: objective function is {objf} (non-finite): "
                        f"training diverged (learning rate too high?) or the egs hold NaN/inf; "
                        f"not writing a model")


def train_one_job(model, archive, opts, device="cpu"):
    """Train ``model`` in place on one archive; returns (objective per frame, frames)."""
    opts.check()
    archive.check_model(model)
    torch.manual_seed(opts.srand)
    model.to(device).train()
    model.reset_natural_gradient()
    if opts.zero_component_stats:
        model.zero_component_stats()
    model.store_component_stats(opts.store_component_stats)
    try:
        return _train(model, archive, opts, device)
    finally:
        model.store_component_stats(False)


class _Updates:
    """The parameter updates of one job: SGD (plain, with momentum, with l2) and backstitch, each
    through max-change; counts how often max-change was enforced, for the log."""

    def __init__(self, model, components, l2_terms, opts, archive):
        self.model, self.components, self.l2_terms, self.opts, self.archive = model, components, l2_terms, opts, archive
        self.momentum_deltas = None
        self.clipped = torch.zeros(len(components))
        self.global_clipped = self.num_updates = 0

    def gradients(self, x, y, mb):
        return _gradients(self.model, self.components, x, y, self.opts.learning_rate, self.archive, mb)

    def apply(self, deltas, scale, max_change_scale=1.0, coefficients=None):
        result = max_change.apply_update(self.components, deltas, self.opts.max_param_change, scale, max_change_scale,
                                         coefficients)
        if not result.applied:
            logger.warning("Infinite parameter change, will not apply.")
        self.clipped.add_((result.factors < 1).float())
        self.global_clipped += result.global_factor < 1
        self.num_updates += 1
        return result

    def sgd(self, x, y, frames, mb):
        """One (natural-gradient) SGD step, with momentum and l2 when asked; returns the objective."""
        opts = self.opts
        objf, grads, coeffs = self.gradients(x, y, mb)
        if opts.momentum or self.l2_terms:
            deltas = _scaled(grads, coeffs)
            if self.momentum_deltas is not None:
                for ds, olds in zip(deltas, self.momentum_deltas):
                    torch._foreach_add_(ds, olds, alpha=opts.momentum)
            if self.l2_terms:
                _add_l2(self.components, deltas, self.l2_terms, frames)
            result = self.apply(deltas, 1.0 - opts.momentum)
        else:  # plain (natural-gradient) SGD: the gradients as they are, lr in the coefficients
            result = self.apply(grads, 1.0, coefficients=coeffs)
        self.momentum_deltas = deltas if (opts.momentum and result.applied) else None
        return objf

    def backstitch(self, x, y, frames, mb, alpha, device):
        """A step of -alpha (natural-gradient estimates frozen), then the gradient at that point
        applied with 1 + alpha; the same dropout masks in both passes. Returns both objectives."""
        rng = _rng_state(device)
        self.model.freeze_natural_gradient(True)
        objf, grads, coeffs = self.gradients(x, y, mb)
        self.model.freeze_natural_gradient(False)
        self.apply(grads, -alpha, alpha, coeffs)
        _set_rng_state(rng, device)
        objf2, grads, coeffs = self.gradients(x, y, mb)
        if self.l2_terms:
            deltas = _scaled(grads, coeffs)
            _add_l2(self.components, deltas, self.l2_terms, frames / (1.0 + alpha))
            self.apply(deltas, 1.0 + alpha, 1.0 + alpha)
        else:
            self.apply(grads, 1.0 + alpha, 1.0 + alpha, coeffs)
        return objf, objf2

    def log_max_change(self, names):
        for name, count in zip(names, self.clipped.tolist()):
            logger.info(f"For {name}, per-component max-change was enforced {100.0 * count / self.num_updates:.2f} % of the time.")
        logger.info(f"The global max-change was enforced {100.0 * self.global_clipped / self.num_updates:.2f} % of the time.")


def _train(model, archive, opts, device):
    components = [(a, [a.weight, a.bias]) for _, a in model.updatable()]
    names = [name for name, _ in model.updatable()]
    l2_terms = _l2_terms(components, opts)
    alpha, interval = opts.backstitch_training_scale, opts.backstitch_training_interval
    # Kaldi draws the backstitch phase at random per job (srand_seed_ % interval); ours is seeded.
    phase = int(np.random.default_rng([opts.srand, 1]).integers(0, 100000)) % interval
    _log_settings(opts, names, components, l2_terms, phase)
    updates = _Updates(model, components, l2_terms, opts, archive)
    output = _Objective("output", opts.print_interval)
    backstitched = _Objective("output_backstitch", opts.print_interval)
    for mb, (x, y, frames) in enumerate(minibatches(archive, opts, model.left_context, model.right_context, device)):
        if alpha > 0 and mb % interval == phase:
            objf, objf2 = updates.backstitch(x, y, frames, mb, alpha, device)
            backstitched.add(mb, objf2.item(), frames)
        else:
            objf = updates.sgd(x, y, frames, mb)
        value = objf.item()  # the one host sync of a minibatch besides max-change's norms
        _check_finite(value, archive, mb)
        output.add(mb, value, frames)
    if output.tot_frames == 0:
        where = "in whole chunks" if opts.chunk else f"at frame {opts.frame}"
        raise NnetError(f"{archive.path}: no egs to train on {where} (minibatch size {opts.minibatch_size})")
    bad = model.nonfinite()
    if bad:
        raise NnetError(f"{archive.path}: parameters became non-finite (NaN or inf) in {', '.join(bad)}: "
                        f"training diverged; not writing a model")
    average = output.log_total()
    if backstitched.tot_frames:
        backstitched.log_total()
    updates.log_max_change(names)
    return average, int(output.tot_frames)
