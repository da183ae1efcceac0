"""The network built from a normalised model config (see config.py).

Every layer takes its input at a list of time offsets (the top-level splice for the first layer,
a layer's own ``splice`` after it: a TDNN), appended along the feature dimension. A layer maps
[batch, time, dim] to [batch, time', dim'], losing the span of its offsets in time, so
``Nnet.forward_chunk`` computes every frame of a chunk ``[batch, left + T + right, feat_dim]`` in
one pass, each hidden frame once. ``Nnet.forward`` is its one-frame case: a context window
``[batch, left + 1 + right, feat_dim]`` around each labelled frame -> log-posteriors ``[batch, dim]``.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from nnet_tools.model import config as config_mod
from nnet_tools.errors import NnetError
from nnet_tools.model.nonlinearity import Nonlinearity


class Affine(nn.Module):
    """Kaldi's (NaturalGradient)AffineComponent: y = x W^T + b, optionally NG-preconditioned.

    The preconditioner state is deliberately not a buffer: it never enters a model file, and
    each training job re-estimates it, as Kaldi does.
    """

    def __init__(self, din, dout, spec):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dout, din))
        self.bias = nn.Parameter(torch.empty(dout))
        stddev = spec["param-stddev"]
        nn.init.normal_(self.weight, std=1.0 / math.sqrt(din) if stddev is None else stddev)
        nn.init.normal_(self.bias, std=spec["bias-stddev"])
        self.max_change = spec["max-change"]
        self.learning_rate_factor = spec["learning-rate-factor"]
        self.l2_regularize = spec.get("l2-regularize", 0.0)
        self.ng_mode = spec["natural-gradient"]
        self.ng_options = {k: spec[k] for k in config_mod.NG_KEYS if k in spec}
        self.reset_natural_gradient()

    def reset_natural_gradient(self):
        """Fresh Fisher estimates (start of each job)."""
        self.pre_in = self.pre_out = None
        if not self.ng_mode:
            return
        from nnet_tools.model import ng
        din, dout = self.weight.shape[1], self.weight.shape[0]
        if self.ng_mode == "simple":
            self.pre_in, self.pre_out = ng.SimpleNaturalGradient(), ng.SimpleNaturalGradient()
            return
        rank_in, rank_out = ng.default_ranks(din, dout)
        shared = {k.replace("-", "_"): v for k, v in self.ng_options.items() if k not in ("rank-in", "rank-out")}
        self.pre_in = ng.OnlineNaturalGradient(rank=self.ng_options.get("rank-in", rank_in), **shared)
        self.pre_out = ng.OnlineNaturalGradient(rank=self.ng_options.get("rank-out", rank_out), **shared)

    def freeze_natural_gradient(self, frozen):
        """Kaldi's FreezeNaturalGradient: keep applying the Fisher estimates, stop updating them."""
        for pre in (self.pre_in, self.pre_out):
            if pre is not None:
                pre.frozen = frozen

    def forward(self, x):
        if self.pre_in is not None and self.training and torch.is_grad_enabled():
            from nnet_tools.model.ng import ng_linear
            return ng_linear(x, self.weight, self.bias, self.pre_in, self.pre_out)
        return F.linear(x, self.weight, self.bias)


def presoftmax_scale(scale, output_dim):
    """``scale`` as a float32 tensor, checked to be a positive finite value per output."""
    scale = torch.as_tensor(scale, dtype=torch.float32).flatten()
    if scale.shape[0] != output_dim:
        raise NnetError(f"presoftmax scale has {scale.shape[0]} values; the model has {output_dim} outputs")
    if not bool(torch.isfinite(scale).all()) or bool((scale <= 0).any()):
        raise NnetError("presoftmax scale must be positive and finite")
    return scale


class BatchNorm(nn.BatchNorm1d):
    """Kaldi's BatchNormComponent: normalise to unit rms, no learned scale or offset.

    momentum 0.2 = Kaldi's stored stats being scaled by 0.8 after every minibatch.
    """

    def __init__(self, dim):
        super().__init__(dim, affine=False, momentum=0.2)

    def forward(self, x):
        if self.training and x.dim() == 2 and x.shape[0] == 1:
            # torch refuses a one-frame minibatch. Kaldi normalises it by its own mean (x itself)
            # and variance (0): the output is 0. Too little to learn statistics from: they stay.
            return x * 0.0
        return super().forward(x)


def _part(name, dim, spec):
    if name in ("relu", "tanh", "sigmoid"):
        return Nonlinearity(name, dim)
    if name == "batchnorm":
        return BatchNorm(dim)
    if name == "dropout":
        return nn.Dropout(spec["dropout-proportion"])
    if name == "log-softmax":
        return nn.LogSoftmax(dim=-1)
    raise NnetError(f"unknown layer part {name!r}")


class Layer(nn.Module):
    """One config layer: the affine transform, then its nonlinearity/batchnorm/dropout parts.

    An output layer may carry ``presoftmax_scale``, a fixed per-class scale on the affine output
    before the log-softmax (Kaldi's FixedScaleComponent from presoftmax_prior_scale.vec). It is a
    buffer that exists only once set, so models without it compute and save exactly as before.
    """

    def __init__(self, din, spec):
        super().__init__()
        self.name = spec["name"]
        self.affine = Affine(din, spec["dim"], spec)
        self.post = nn.Sequential(*[_part(p, spec["dim"], spec) for p in spec["parts"][1:]])
        self.register_buffer("presoftmax_scale", None)

    def forward(self, x):
        """[..., din] -> [..., dim]: the affine acts on the last axis; batch-norm sees every frame
        of every sequence as one row, as Kaldi's does."""
        y = self.affine(x)
        if self.presoftmax_scale is not None:
            y = y * self.presoftmax_scale
        return self.post(y.reshape(-1, y.shape[-1])).reshape(y.shape)


class Nnet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.left_context, self.right_context = config_mod.context(cfg)
        self.offsets = config_mod.layer_offsets(cfg)
        din = cfg["input-dim"]
        self.layers = nn.ModuleList()
        for spec, offsets in zip(cfg["layers"], self.offsets):
            self.layers.append(Layer(din * len(offsets), spec))
            din = spec["dim"]

    @property
    def input_dim(self):
        return self.config["input-dim"]

    @property
    def output_dim(self):
        return self.config["layers"][-1]["dim"]

    @property
    def window(self):
        return self.left_context + 1 + self.right_context

    def forward(self, windows):
        """[batch, left + 1 + right, feat_dim] windows -> [batch, dim] outputs for their centre frames."""
        return self.forward_chunk(windows)[:, 0]

    def forward_chunk(self, windows):
        """[batch, left + T + right, feat_dim] -> [batch, T, dim]: outputs for the T frames after
        the left context, in one pass."""
        frames = windows.shape[1] - self.left_context - self.right_context
        if windows.dim() != 3 or frames < 1:
            raise NnetError(f"need input [batch, {self.left_context} + T + {self.right_context}, "
                            f"{self.input_dim}] with T >= 1, got {list(windows.shape)}")
        x, first = windows, -self.left_context  # first: the time of x's row 0 (chunk frame 0 is 0)
        for layer, offsets in zip(self.layers, self.offsets):
            # Output row j is at time first - offsets[0] + j and reads input rows j + o - offsets[0].
            n = x.shape[1] - (offsets[-1] - offsets[0])
            parts = [x[:, o - offsets[0]:o - offsets[0] + n] for o in offsets]
            x = layer(parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1))
            first -= offsets[0]
        # A chain whose offsets all lean one way computes a little more than the chunk (context
        # is never below 0): keep frames 0..T-1.
        return x[:, -first:frames - first]

    def updatable(self):
        """(name, Affine) of every updatable component, in order: the unit of max-change."""
        return [(layer.name, layer.affine) for layer in self.layers]

    @torch.no_grad()
    def nonfinite(self):
        """Names of the float parameters and statistics (batch-norm) holding NaN or inf."""
        return [name for name, t in self.state_dict().items() if t.is_floating_point() and not bool(t.isfinite().all())]

    def reset_natural_gradient(self):
        for _, affine in self.updatable():
            affine.reset_natural_gradient()

    def freeze_natural_gradient(self, frozen):
        for _, affine in self.updatable():
            affine.freeze_natural_gradient(frozen)

    def dropout_parts(self):
        """(component name, layer index, nn.Dropout) of every dropout part, named as xconfig names
        its components (``tdnn2.dropout``), which is what set-dropout-proportion patterns match."""
        return [(f"{layer.name}.dropout", i, part) for i, layer in enumerate(self.layers)
                for part in layer.post if isinstance(part, nn.Dropout)]

    def nonlinearities(self):
        """(component name, Nonlinearity) of every nonlinearity, named as xconfig names them
        (``tdnn1.relu``)."""
        return [(f"{layer.name}.{part.kind}", part) for layer in self.layers
                for part in layer.post if isinstance(part, Nonlinearity)]

    def zero_component_stats(self):
        """Kaldi's ZeroComponentStats (each training job starts with it)."""
        for _, part in self.nonlinearities():
            part.zero_stats()

    def store_component_stats(self, store):
        """Whether training forward/backward passes accumulate the nonlinearities' statistics."""
        for _, part in self.nonlinearities():
            part.store_stats = store

    def set_presoftmax_scale(self, scale):
        """Fix the output layer's per-class pre-softmax scale (a [num_classes] vector)."""
        scale = presoftmax_scale(scale, self.output_dim)
        output = self.layers[-1]
        output.presoftmax_scale = scale.to(output.affine.weight.device)


def padded(feats, left, right):
    """[T, D] utterance -> [left + T + right, D], edges padded by repeating the first/last frame
    as Kaldi does."""
    t = feats.shape[0]
    return feats[torch.arange(-left, t + right).clamp_(0, t - 1)]


def frame_windows(feats, left, right):
    """[T, D] utterance -> [T, left+1+right, D] context windows, edges padded by repeating the
    first/last frame as Kaldi does."""
    return padded(feats, left, right).unfold(0, left + 1 + right, 1).transpose(1, 2)
