"""Outer optimizers on the averaged delta: what becomes of the jobs' average each iteration.

With W_g the model the jobs started from and W_avg their average, G = W_avg - W_g is one
"block" step. Kaldi takes W_avg as the next model (``average``). Two later methods treat G as
an update to be smoothed across iterations:

- ``bmuf`` (Chen & Huo 2016, block-wise model-update filtering): Delta = m * Delta + lr * G;
  W = W + Delta; the jobs next start from W (classic) or W + m * Delta (Nesterov look-ahead).
  The state is W and Delta; m = 1 - 1/N is the paper's choice for N jobs.
- ``nesterov`` (Douillard et al. 2023, DiLoCo's outer optimizer): SGD with Nesterov momentum on
  the outer gradient -G, as torch.optim.SGD(nesterov=True): v = m * v - G; W_g -= lr * (-G + m * v).

Only parameters go through the optimizer; batch-norm statistics are taken from the average.
State is a dict of tensors keyed by parameter name (saved with torch.save, loaded weights-only).
"""
import math

import torch

from nnet_tools.errors import NnetError


class Bmuf:
    def __init__(self, momentum, learning_rate=1.0, nesterov=True):
        self.momentum, self.learning_rate, self.nesterov = momentum, learning_rate, nesterov

    @torch.no_grad()
    def step(self, start, average, state):
        """start, average: {name: tensor}; returns (the jobs' next start, new state)."""
        out, new_state = {}, {}
        for name, w_g in start.items():
            w = state.get(f"w.{name}", w_g)  # W(t-1); equals W_g(t-1) on the first block
            delta = state.get(f"delta.{name}", torch.zeros_like(w_g))
            delta = self.momentum * delta + self.learning_rate * (average[name] - w_g)
            w = w + delta
            out[name] = w + self.momentum * delta if self.nesterov else w
            new_state[f"w.{name}"], new_state[f"delta.{name}"] = w, delta
        return out, new_state


class Nesterov:
    def __init__(self, momentum=0.9, learning_rate=0.7):
        self.momentum, self.learning_rate = momentum, learning_rate

    @torch.no_grad()
    def step(self, start, average, state):
        out, new_state = {}, {}
        for name, w_g in start.items():
            grad = w_g - average[name]  # the outer gradient: minus the block's step
            v = self.momentum * state.get(f"v.{name}", torch.zeros_like(w_g)) + grad
            out[name] = w_g - self.learning_rate * (grad + self.momentum * v)
            new_state[f"v.{name}"] = v
        return out, new_state


DEFAULTS = {"bmuf": lambda jobs: (1.0 - 1.0 / jobs, 1.0), "nesterov": lambda jobs: (0.9, 0.7)}


STATE_KEYS = {"bmuf": ("w", "delta"), "nesterov": ("v",)}  # the state's tensors per parameter


def make(method, jobs, momentum=None, learning_rate=None, nesterov=True):
    """The optimizer for ``method`` with the defaults for ``jobs`` parallel jobs."""
    if jobs < 1:
        raise NnetError(f"--jobs must be >= 1, got {jobs}")
    m, lr = DEFAULTS[method](jobs)
    m = m if momentum is None else momentum
    lr = lr if learning_rate is None else learning_rate
    if not (0 <= m < 1 and 0 < lr < math.inf):  # NaN fails both
        raise NnetError(f"need --momentum in [0, 1) and a finite --learning-rate > 0, got {m} and {lr}")
    return Bmuf(m, lr, nesterov) if method == "bmuf" else Nesterov(m, lr)


def check_state(state, method, params, where):
    """A state written by the same method for the same parameters, finite: any other would be
    ignored in part, or fail on a shape deep in the step."""
    if not isinstance(state, dict):
        raise NnetError(f"{where}: not an outer-optimizer state (not a dict of tensors)")
    want = {f"{k}.{name}": p.shape for name, p in params.items() for k in STATE_KEYS[method]}
    if state and set(state) != set(want):
        raise NnetError(f"{where}: not a {method} state for this model (its tensors are not "
                        f"{', '.join(f'{k}.*' for k in STATE_KEYS[method])} of its parameters)")
    for key, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or tensor.shape != want[key] or not bool(tensor.isfinite().all()):
            raise NnetError(f"{where}: {key} is not a finite tensor of the parameter's shape {tuple(want[key])}")
