"""Nonlinearities (Kaldi's RectifiedLinear-, Sigmoid- and TanhComponent) and the statistics nnet3
keeps in them.

While a training job stores stats (``store_stats``, nnet3-train's --store-component-stats), each
forward pass adds, per dimension, the sum of the output values and of the nonlinearity's
derivative at them, and the backward pass the sum of the squared derivative of the objective
w.r.t. the output; each with its frame count. The sums are float64 buffers, so they travel in
the model file, and nnet-average-models averages sums and counts alike, as Kaldi's
NonlinearComponent::Scale/Add do: an average model's per-dimension averages are the
count-weighted mean of its jobs' averages. Accumulation stays on the device (no host sync), and
as in Kaldi only some minibatches are sampled, to keep the cost low: value and derivative stats
on every other forward pass, the output-derivative stats on 3 backward passes in 4 (Kaldi draws
these at random; we take them in turn, so a run is reproducible). Column sums are products with
a ones vector: one BLAS call, where a reduction over rows is slow on CPU.
"""
import torch
from torch import nn

KALDI_TYPES = {"relu": "RectifiedLinearComponent", "sigmoid": "SigmoidComponent", "tanh": "TanhComponent"}
STATS = ("value_sum", "deriv_sum", "oderiv_sumsq", "count", "oderiv_count")


def is_stat(key):
    """Whether a state-dict key is one of these statistics (absent from older model files)."""
    return key.rsplit(".", 1)[-1] in STATS


class Nonlinearity(nn.Module):
    def __init__(self, kind, dim):
        super().__init__()
        self.kind = kind
        self.function = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[kind]
        self.store_stats = False
        self.passes = 0  # forward passes while storing stats, for the sampling
        for name in ("value_sum", "deriv_sum", "oderiv_sumsq"):
            self.register_buffer(name, torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("oderiv_count", torch.zeros((), dtype=torch.float64))

    @property
    def kaldi_type(self):
        return KALDI_TYPES[self.kind]

    def forward(self, x):
        """[rows, dim] -> [rows, dim]."""
        y = self.function(x)
        if self.store_stats and self.training and y.requires_grad:
            self.passes += 1
            if self.passes % 2 == 1:  # the first pass, then every other one
                self._store(y.detach())
            if self.passes % 4 != 0:
                y.register_hook(self._store_backprop)
        return y

    @torch.no_grad()
    def _store(self, y):
        ones = y.new_ones(1, y.shape[0])
        self.value_sum += (ones @ y)[0]
        if self.kind == "relu":
            # y >= 0, so sign(y) is Kaldi's Heaviside step (0 at 0); 7x faster here than (y > 0).to()
            deriv = torch.sign(y)
        elif self.kind == "sigmoid":
            deriv = y - y * y
        else:  # tanh: 1 - y^2
            deriv = 1 - y * y
        self.deriv_sum += (ones @ deriv)[0]
        self.count += y.shape[0]

    @torch.no_grad()
    def _store_backprop(self, grad):
        # The hook sees d(-objf)/dy; its square is the same as Kaldi's d(objf)/dy squared.
        self.oderiv_sumsq += (grad.new_ones(1, grad.shape[0]) @ (grad * grad))[0]
        self.oderiv_count += grad.shape[0]

    @torch.no_grad()
    def zero_stats(self):
        self.passes = 0
        for name in STATS:
            getattr(self, name).zero_()

    def averages(self):
        """(value-avg, deriv-avg, oderiv-rms) per dimension as float64 numpy vectors, each None
        when its count is 0 (Kaldi's NonlinearComponent::Info prints only those it has)."""
        count, ocount = float(self.count), float(self.oderiv_count)
        value = (self.value_sum / count).cpu().numpy() if count > 0 else None
        deriv = (self.deriv_sum / count).cpu().numpy() if count > 0 else None
        oderiv = (self.oderiv_sumsq / ocount).clamp(min=0).sqrt().cpu().numpy() if ocount > 0 else None
        return value, deriv, oderiv
