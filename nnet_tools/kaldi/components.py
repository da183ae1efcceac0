"""Kaldi nnet3 components in their file form (src/nnet3/nnet-simple-component.cc,
nnet-normalize-component.cc, nnet-general-component.cc, nnet-component-itf.cc), binary and text.

A ``Component`` is its Kaldi type name (``kind``, e.g. ``NaturalGradientAffineComponent``) and the
fields its file holds, as numpy arrays and numbers. ``read_component`` takes a KaldiReader at the
component's opening token; ``write_component`` writes what Kaldi's Write writes, field for field.
A type outside ``READERS`` is refused in one line (its layout is unknown, so nothing after it can
be read).
"""
from types import SimpleNamespace

import numpy as np

from nnet_tools.errors import NnetError

NONLINEAR = ("RectifiedLinearComponent", "SigmoidComponent", "TanhComponent", "LogSoftmaxComponent",
             "SoftmaxComponent")
AFFINE = ("AffineComponent", "NaturalGradientAffineComponent", "FixedAffineComponent")
UNSET_THRESHOLD = -1000.0


class Component(SimpleNamespace):
    """``kind`` plus the fields of one component."""

    @property
    def input_dim(self):
        if self.kind in AFFINE:
            return self.linear.shape[1]
        if self.kind in ("FixedScaleComponent",):
            return len(self.scales)
        if self.kind == "FixedBiasComponent":
            return len(self.bias)
        return self.dim

    @property
    def output_dim(self):
        if self.kind in AFFINE:
            return self.linear.shape[0]
        if self.kind == "NormalizeComponent" and self.add_log_stddev:
            return self.dim + self.dim // self.block_dim
        return self.input_dim


def _optional(r, token, read):
    """The value after ``token`` if it comes next, else None."""
    if r.peek_token() == token:
        r.expect(token)
        return read()
    return None


def _required(r, fields, pairs):
    """Each (key, token, read) in turn: the token, then its value into ``fields``."""
    for key, token, read in pairs:
        r.expect(token)
        fields[key] = read()
    return fields


def _opening(r, kind):
    """Kaldi's readers accept the opening tag again (ExpectOneOrTwoTokens)."""
    if r.peek_token() == f"<{kind}>":
        r.expect(f"<{kind}>")


def _read_updatable(r, kind):
    """ReadUpdatableCommon: learning-rate factor, is-gradient, max-change, l2, learning rate."""
    _opening(r, kind)
    lr_factor = _optional(r, "<LearningRateFactor>", r.float)
    _optional(r, "<IsGradient>", r.bool)
    max_change = _optional(r, "<MaxChange>", r.float)
    l2 = _optional(r, "<L2Regularize>", r.float)
    learning_rate = _optional(r, "<LearningRate>", r.float)
    return dict(learning_rate_factor=1.0 if lr_factor is None else lr_factor, max_change=max_change or 0.0,
                l2_regularize=l2 or 0.0, learning_rate=0.001 if learning_rate is None else learning_rate)


def _read_affine(r, kind):
    fields = {} if kind == "FixedAffineComponent" else _read_updatable(r, kind)
    if kind == "FixedAffineComponent":
        _opening(r, kind)
    r.expect("<LinearParams>")
    fields["linear"] = r.matrix()
    r.expect("<BiasParams>")
    fields["bias"] = r.vector()
    if kind == "NaturalGradientAffineComponent":
        _required(r, fields, (("rank_in", "<RankIn>", r.int32), ("rank_out", "<RankOut>", r.int32)))
        fields["orthonormal_constraint"] = _optional(r, "<OrthonormalConstraint>", r.float) or 0.0
        _required(r, fields, (("update_period", "<UpdatePeriod>", r.int32),
                              ("num_samples_history", "<NumSamplesHistory>", r.float), ("alpha", "<Alpha>", r.float)))
        _optional(r, "<MaxChangePerSample>", r.float)
    _optional(r, "<IsGradient>", r.bool)
    if kind == "NaturalGradientAffineComponent" and _optional(r, "<UpdateCount>", r.float) is not None:
        for token in ("<ActiveScalingCount>", "<MaxChangeScaleStats>"):
            r.expect(token)
            r.float()
    if kind == "AffineComponent":
        fields["orthonormal_constraint"] = _optional(r, "<OrthonormalConstraint>", r.float) or 0.0
    r.expect(f"</{kind}>")
    rows, cols = fields["linear"].shape
    if fields["bias"].shape != (rows,):
        raise r.fail(f"a bias of dimension {rows} (the linear params are {rows} x {cols})",
                     f"dimension {len(fields['bias'])}")
    return fields


def _read_nonlinear(r, kind):
    _opening(r, kind)
    r.expect("<Dim>")
    dim = r.int32()
    fields = dict(dim=dim, block_dim=_optional(r, "<BlockDim>", r.int32) or dim)
    _required(r, fields, (("value_avg", "<ValueAvg>", r.vector), ("deriv_avg", "<DerivAvg>", r.vector),
                          ("count", "<Count>", r.float)))
    fields["oderiv_rms"] = _optional(r, "<OderivRms>", r.vector)
    fields["oderiv_count"] = 0.0
    if fields["oderiv_rms"] is not None:
        r.expect("<OderivCount>")
        fields["oderiv_count"] = r.float()
    for key, token, default in (("self_repaired", "<NumDimsSelfRepaired>", 0.0),
                                ("processed", "<NumDimsProcessed>", 0.0),
                                ("lower_threshold", "<SelfRepairLowerThreshold>", UNSET_THRESHOLD),
                                ("upper_threshold", "<SelfRepairUpperThreshold>", UNSET_THRESHOLD),
                                ("self_repair_scale", "<SelfRepairScale>", 0.0)):
        value = _optional(r, token, r.float)
        fields[key] = default if value is None else value
    r.expect(f"</{kind}>")
    return fields


def _read_batchnorm(r, kind):
    _opening(r, kind)
    fields = _required(r, {}, (("dim", "<Dim>", r.int32), ("block_dim", "<BlockDim>", r.int32),
                               ("epsilon", "<Epsilon>", r.float), ("target_rms", "<TargetRms>", r.float),
                               ("test_mode", "<TestMode>", r.bool), ("count", "<Count>", r.float),
                               ("mean", "<StatsMean>", r.vector), ("var", "<StatsVar>", r.vector)))
    r.expect(f"</{kind}>")
    return fields


def _read_dropout(r, kind):
    _opening(r, kind)
    r.expect("<Dim>")
    fields = dict(dim=r.int32())
    if kind == "GeneralDropoutComponent":
        r.expect("<BlockDim>")
        fields["block_dim"] = r.int32()
        r.expect("<TimePeriod>")
        fields["time_period"] = r.int32()
    r.expect("<DropoutProportion>")
    fields["proportion"] = r.float()
    if kind == "DropoutComponent":
        fields["per_frame"] = bool(_optional(r, "<DropoutPerFrame>", r.bool))
        fields["test_mode"] = bool(_optional(r, "<TestMode>", r.bool))
    else:
        fields["specaugment"] = _optional(r, "<SpecAugmentMaxProportion>", r.float) or 0.0
        if fields["specaugment"]:
            _optional(r, "<SpecAugmentMaxRegions>", r.int32)
        fields["test_mode"] = _optional(r, "<TestMode>", lambda: True) or False
        fields["continuous"] = _optional(r, "<Continuous>", lambda: True) or False
    r.expect(f"</{kind}>")
    return fields


def _read_normalize(r, kind):
    _opening(r, kind)
    token = r.token()
    if token not in ("<Dim>", "<InputDim>"):
        raise r.fail("<Dim> or <InputDim>", repr(token))
    dim = r.int32()
    fields = dict(dim=dim, block_dim=_optional(r, "<BlockDim>", r.int32) or dim)
    target = _optional(r, "<TargetRms>", r.float)
    fields["target_rms"] = 1.0 if target is None else target
    fields["add_log_stddev"] = bool(_optional(r, "<AddLogStddev>", r.bool))
    if _optional(r, "<ValueAvg>", r.vector) is not None:  # an old file's statistics: unused
        r.expect("<DerivAvg>")
        r.vector()
        r.expect("<Count>")
        r.float()
    r.expect(f"</{kind}>")
    return fields


def _read_fixed_vector(token):
    def read(r, kind):
        _opening(r, kind)
        r.expect(token)
        values = r.vector()
        r.expect(f"</{kind}>")
        return {"scales" if token == "<Scales>" else "bias": values}
    return read


READERS = {**{k: _read_affine for k in AFFINE}, **{k: _read_nonlinear for k in NONLINEAR},
           "BatchNormComponent": _read_batchnorm, "DropoutComponent": _read_dropout,
           "GeneralDropoutComponent": _read_dropout, "NormalizeComponent": _read_normalize,
           "FixedScaleComponent": _read_fixed_vector("<Scales>"), "FixedBiasComponent": _read_fixed_vector("<Bias>")}


def read_component(r, name):
    """Component::ReadNew: the opening token names the type."""
    token = r.token()
    kind = token[1:-1] if token.startswith("<") and token.endswith(">") else token
    if kind not in READERS:
        raise NnetError(f"{r.path}: component '{name}' is of type {kind}, which nnet-tools does not support "
                        f"(supported: {', '.join(sorted(READERS))})")
    try:
        return Component(kind=kind, **READERS[kind](r, kind))
    except NnetError as e:
        raise NnetError(f"{e} (reading component '{name}', a {kind})") from None


def _write_updatable(w, c):
    w.token(f"<{c.kind}>")
    if c.learning_rate_factor != 1.0:
        w.token("<LearningRateFactor>")
        w.float(c.learning_rate_factor)
    if c.max_change > 0:
        w.token("<MaxChange>")
        w.float(c.max_change)
    if c.l2_regularize > 0:
        w.token("<L2Regularize>")
        w.float(c.l2_regularize)
    w.token("<LearningRate>")
    w.float(c.learning_rate)


def _write_affine(w, c):
    if c.kind == "FixedAffineComponent":
        w.token(f"<{c.kind}>")
    else:
        _write_updatable(w, c)
    w.token("<LinearParams>")
    w.matrix(np.asarray(c.linear, np.float32))
    w.token("<BiasParams>")
    w.vector(np.asarray(c.bias, np.float32))
    if c.kind == "NaturalGradientAffineComponent":
        for token, value in (("<RankIn>", c.rank_in), ("<RankOut>", c.rank_out)):
            w.token(token)
            w.int32(value)
    if c.kind != "FixedAffineComponent" and getattr(c, "orthonormal_constraint", 0.0):
        w.token("<OrthonormalConstraint>")
        w.float(c.orthonormal_constraint)
    if c.kind == "NaturalGradientAffineComponent":
        w.token("<UpdatePeriod>")
        w.int32(c.update_period)
        for token, value in (("<NumSamplesHistory>", c.num_samples_history), ("<Alpha>", c.alpha)):
            w.token(token)
            w.float(value)
    w.token(f"</{c.kind}>")


def _vector32(values):
    return np.zeros(0, np.float32) if values is None else np.asarray(values, np.float32)


def _write_head(w, c, dim_token="<Dim>"):
    """The opening tag, the dim and, when it differs, the block dim."""
    w.token(f"<{c.kind}>")
    w.token(dim_token)
    w.int32(c.dim)
    if c.block_dim != c.dim:
        w.token("<BlockDim>")
        w.int32(c.block_dim)


def _write_nonlinear(w, c):
    _write_head(w, c)
    for token, values in (("<ValueAvg>", c.value_avg), ("<DerivAvg>", c.deriv_avg)):
        w.token(token)
        w.vector(_vector32(values))
    w.token("<Count>")
    w.float(c.count, double=True)
    w.token("<OderivRms>")
    w.vector(_vector32(c.oderiv_rms))
    w.token("<OderivCount>")
    w.float(c.oderiv_count, double=True)
    for token, value in (("<NumDimsSelfRepaired>", c.self_repaired), ("<NumDimsProcessed>", c.processed)):
        w.token(token)
        w.float(value, double=True)
    for token, value, unset in (("<SelfRepairLowerThreshold>", c.lower_threshold, UNSET_THRESHOLD),
                                ("<SelfRepairUpperThreshold>", c.upper_threshold, UNSET_THRESHOLD),
                                ("<SelfRepairScale>", c.self_repair_scale, 0.0)):
        if value != unset:
            w.token(token)
            w.float(value)
    w.token(f"</{c.kind}>")


def _write_batchnorm(w, c):
    w.token(f"<{c.kind}>")
    for token, value, write in (("<Dim>", c.dim, w.int32), ("<BlockDim>", c.block_dim, w.int32),
                                ("<Epsilon>", c.epsilon, w.float), ("<TargetRms>", c.target_rms, w.float),
                                ("<TestMode>", c.test_mode, w.bool)):
        w.token(token)
        write(value)
    w.token("<Count>")
    w.float(c.count, double=True)
    for token, values in (("<StatsMean>", c.mean), ("<StatsVar>", c.var)):
        w.token(token)
        w.vector(_vector32(values))
    w.token(f"</{c.kind}>")


def _write_dropout(w, c):
    w.token(f"<{c.kind}>")
    w.token("<Dim>")
    w.int32(c.dim)
    if c.kind == "GeneralDropoutComponent":
        for token, value in (("<BlockDim>", c.block_dim), ("<TimePeriod>", c.time_period)):
            w.token(token)
            w.int32(value)
    w.token("<DropoutProportion>")
    w.float(c.proportion)
    if c.kind == "DropoutComponent":
        w.token("<DropoutPerFrame>")
        w.bool(c.per_frame)
        w.token("<TestMode>")
        w.bool(c.test_mode)
    else:
        if c.specaugment:
            w.token("<SpecAugmentMaxProportion>")
            w.float(c.specaugment)
        for token, on in (("<TestMode>", c.test_mode), ("<Continuous>", c.continuous)):
            if on:
                w.token(token)
    w.token(f"</{c.kind}>")


def _write_normalize(w, c):
    _write_head(w, c, "<InputDim>")
    w.token("<TargetRms>")
    w.float(c.target_rms)
    w.token("<AddLogStddev>")
    w.bool(c.add_log_stddev)
    w.token(f"</{c.kind}>")


def _write_fixed_vector(w, c):
    w.token(f"<{c.kind}>")
    w.token("<Scales>" if c.kind == "FixedScaleComponent" else "<Bias>")
    w.vector(_vector32(c.scales if c.kind == "FixedScaleComponent" else c.bias))
    w.token(f"</{c.kind}>")


WRITERS = {**{k: _write_affine for k in AFFINE}, **{k: _write_nonlinear for k in NONLINEAR},
           "BatchNormComponent": _write_batchnorm, "DropoutComponent": _write_dropout,
           "GeneralDropoutComponent": _write_dropout, "NormalizeComponent": _write_normalize,
           "FixedScaleComponent": _write_fixed_vector, "FixedBiasComponent": _write_fixed_vector}


def write_component(w, c):
    WRITERS[c.kind](w, c)
