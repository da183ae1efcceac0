"""Our Nnet (model/nnet.py) <-> a KaldiNnet (nnet3.py), named as Kaldi's xconfig names things.

A layer ``L`` becomes the component-nodes ``L.affine`` (NaturalGradientAffineComponent, or
AffineComponent without natural gradient, FixedAffineComponent with learning-rate-factor 0),
``L.fixed-scale`` (the presoftmax scale), then ``L.relu|tanh|sigmoid``, ``L.batchnorm``,
``L.dropout``, ``L.log-softmax`` as its parts say; its input is the layer below read at its splice
offsets, ``Append(Offset(tdnn1.batchnorm, -1), tdnn1.batchnorm, Offset(tdnn1.batchnorm, 1))``.
Batch-norm is written in test mode with torch's statistics and epsilon (and ``<Count>`` >= 1, so
Kaldi keeps them); dropout as a GeneralDropoutComponent in test mode, which scales as torch's
does (by 1/(1-p) while training, not at all in test mode).

Back from Kaldi: the same chain of components, each layer one affine and what follows it up to
the next. What our layers cannot express is refused in one line naming the component. Kaldi's
batch-norm epsilon and target-rms are folded into the stored variance, a DropoutComponent's test-
mode scale (1 - p) into the next affine's weights: in test mode the model computes what Kaldi does.
"""
import numpy as np
import torch

from nnet_tools.errors import NnetError
from nnet_tools.kaldi.components import Component
from nnet_tools.kaldi.nnet3 import KaldiNnet
from nnet_tools.model import config as config_mod, ng
from nnet_tools.model.nnet import BatchNorm, Nnet
from nnet_tools.model.nonlinearity import KALDI_TYPES, Nonlinearity

LEARNING_RATE = 0.001  # Kaldi's default; ours is a job option, not part of the model
NG_DEFAULTS = {"update-period": 4, "num-samples-history": 2000.0, "alpha": 4.0}
_PART_OF_TYPE = {v: k for k, v in KALDI_TYPES.items()}


def _f32(value):
    """A float32 read from a binary file as the decimal it was written from (0.2, not 0.200000003)."""
    return float(str(np.float32(value)))


def _np(t, dtype=np.float32):
    return t.detach().cpu().numpy().astype(dtype)


def _affine(affine):
    w, b = _np(affine.weight), _np(affine.bias)
    if not affine.ng_mode and affine.learning_rate_factor == 0:
        return Component(kind="FixedAffineComponent", linear=w, bias=b)
    common = dict(linear=w, bias=b, learning_rate_factor=affine.learning_rate_factor, learning_rate=LEARNING_RATE,
                  max_change=affine.max_change, l2_regularize=affine.l2_regularize, orthonormal_constraint=0.0)
    if not affine.ng_mode:
        return Component(kind="AffineComponent", **common)
    rank_in, rank_out = ng.default_ranks(w.shape[1], w.shape[0])
    opts = {**NG_DEFAULTS, "rank-in": rank_in, "rank-out": rank_out, **affine.ng_options}
    return Component(kind="NaturalGradientAffineComponent", rank_in=opts["rank-in"], rank_out=opts["rank-out"],
                     update_period=opts["update-period"], num_samples_history=float(opts["num-samples-history"]),
                     alpha=float(opts["alpha"]), **common)


def _nonlinear(kind, dim, part=None):
    stats = dict(value_avg=None, deriv_avg=None, count=0.0, oderiv_rms=None, oderiv_count=0.0)
    if part is not None:
        value, deriv, oderiv = part.averages()
        stats.update(value_avg=value, deriv_avg=deriv, count=float(part.count), oderiv_rms=oderiv,
                     oderiv_count=float(part.oderiv_count))
    return Component(kind=kind, dim=dim, block_dim=dim, self_repaired=0.0, processed=0.0,
                     lower_threshold=-1000.0, upper_threshold=-1000.0, self_repair_scale=0.0, **stats)


def _part(part, dim):
    if isinstance(part, Nonlinearity):
        return part.kind, _nonlinear(part.kaldi_type, dim, part)
    if isinstance(part, BatchNorm):
        return "batchnorm", Component(kind="BatchNormComponent", dim=dim, block_dim=dim, epsilon=part.eps,
                                      target_rms=1.0, test_mode=True,
                                      count=max(1.0, float(part.num_batches_tracked)),
                                      mean=_np(part.running_mean), var=_np(part.running_var))
    if isinstance(part, torch.nn.Dropout):
        return "dropout", Component(kind="GeneralDropoutComponent", dim=dim, block_dim=dim, time_period=0,
                                    proportion=float(part.p), specaugment=0.0, test_mode=True, continuous=False)
    return "log-softmax", _nonlinear("LogSoftmaxComponent", dim)


def _input(node, offsets):
    parts = [("node", node) if o == 0 else ("offset", ("node", node), o) for o in offsets]
    return parts[0] if len(parts) == 1 else ("append", parts)


def from_ours(net, priors=None, transition_model=None):
    """The KaldiNnet of our ``net``; with a transition model, a final.mdl's (AmNnetSimple + priors)."""
    nodes, components, below = [], {}, "input"
    for layer, offsets in zip(net.layers, net.offsets):
        dim = layer.affine.weight.shape[0]
        chain = [("affine", _affine(layer.affine))]
        if layer.presoftmax_scale is not None:
            chain.append(("fixed-scale", Component(kind="FixedScaleComponent", scales=_np(layer.presoftmax_scale))))
        chain += [_part(part, dim) for part in layer.post]
        for i, (suffix, component) in enumerate(chain):
            name = f"{layer.name}.{suffix}"
            components[name] = component
            nodes.append((name, name, _input(below, offsets) if i == 0 else ("node", below)))
            below = name
    if transition_model is not None and priors is None:
        priors = np.zeros(0, np.float32)
    return KaldiNnet({"input": net.input_dim}, nodes, {"output": (("node", below), "linear")}, components,
                     transition_model, None if priors is None else np.asarray(priors, np.float32))


# --- back ---------------------------------------------------------------------------------------

def _single_source(desc, where):
    """(node, offsets) of a descriptor that reads one node at increasing time offsets."""
    parts = desc[1] if desc[0] == "append" else [desc]
    pairs = []
    for p in parts:
        if p[0] == "node":
            pairs.append((p[1], 0))
        elif p[0] == "offset" and p[1][0] == "node":
            pairs.append((p[1][1], p[2]))
        else:
            raise NnetError(f"{where}: its input is not one node at time offsets (Append of Offsets)")
    names, offsets = {n for n, _ in pairs}, [o for _, o in pairs]
    if len(names) != 1 or offsets != sorted(set(offsets)):
        raise NnetError(f"{where}: its input must read one node at increasing, distinct offsets "
                        f"(nnet-tools splices), not {[f'{n}@{o}' for n, o in pairs]}")
    return names.pop(), offsets


def _chain(knet, path):
    """The component-nodes from input to output, each with the offsets it reads the one below at."""
    name, offsets = _single_source(knet.outputs["output"][0], f"{path}: output-node 'output'")
    if offsets != [0]:
        raise NnetError(f"{path}: output-node 'output' reads '{name}' at offsets {offsets}; nnet-tools "
                        f"models output their last component")
    chain = []
    while name != "input":
        node = knet.node(name)
        source, offsets = _single_source(node[2], f"{path}: component-node '{name}'")
        chain.append((name, knet.components[node[1]], offsets))
        name = source
    return chain[::-1]


def _layer_name(node):
    return node[:-len(".affine")] if node.endswith(".affine") else node


def _affine_spec(c, name):
    spec = {"name": name, "dim": c.output_dim}
    if c.kind == "FixedAffineComponent":
        return {**spec, "natural-gradient": False, "learning-rate-factor": 0.0, "max-change": 0.0}
    spec.update({"natural-gradient": c.kind == "NaturalGradientAffineComponent", "max-change": _f32(c.max_change),
                 "learning-rate-factor": _f32(c.learning_rate_factor)})
    if c.l2_regularize:
        spec["l2-regularize"] = _f32(c.l2_regularize)
    if c.kind == "NaturalGradientAffineComponent":
        rank_in, rank_out = ng.default_ranks(c.input_dim, c.output_dim)
        for key, value, default in (("rank-in", c.rank_in, rank_in), ("rank-out", c.rank_out, rank_out),
                                    ("update-period", c.update_period, 4),
                                    ("num-samples-history", _f32(c.num_samples_history), 2000.0),
                                    ("alpha", _f32(c.alpha), 4.0)):
            if value != default:
                spec[key] = value
    return spec


def _layers(chain, path):
    """Group the chain into layers: [(spec, offsets, [(node, component)])]."""
    layers = []
    for name, c, offsets in chain:
        if c.kind.endswith("AffineComponent"):
            layers.append((_affine_spec(c, _layer_name(name)), offsets, [(name, c)]))
            continue
        if not layers:
            raise NnetError(f"{path}: component '{name}' ({c.kind}) comes before any affine component; "
                            f"nnet-tools layers start with one")
        if offsets != [0]:
            raise NnetError(f"{path}: component-node '{name}' ({c.kind}) reads its input at offsets {offsets}; "
                            f"in nnet-tools only an affine component splices")
        layers[-1][2].append((name, c))
    return layers


def _parts(spec, members, is_last, path):
    """The config type of one layer from its components after the affine; checked by config."""
    parts = []
    for name, c in members[1:]:
        if c.kind in _PART_OF_TYPE:
            parts.append(_PART_OF_TYPE[c.kind])
        elif c.kind == "BatchNormComponent":
            if c.block_dim != c.dim:
                raise NnetError(f"{path}: component '{name}': batch-norm with block-dim {c.block_dim} != dim {c.dim}")
            parts.append("batchnorm")
        elif c.kind in ("DropoutComponent", "GeneralDropoutComponent"):
            parts.append("dropout")
        elif c.kind == "LogSoftmaxComponent":
            parts.append("log-softmax")
        elif c.kind == "FixedScaleComponent" and is_last and len(parts) == 0:
            parts.append("fixed-scale")
        else:
            raise NnetError(f"{path}: component '{name}' ({c.kind}) has no nnet-tools equivalent here: a layer is "
                            f"an affine, then relu|tanh|sigmoid, batchnorm, dropout; the output layer's last "
                            f"component is a log-softmax")
    core = [p for p in parts if p != "fixed-scale"]
    if is_last:
        if core != ["log-softmax"]:
            raise NnetError(f"{path}: the last layer ('{spec['name']}') must be affine [+ fixed-scale] + "
                            f"log-softmax to be an nnet-tools output layer, not {parts or ['affine']}")
        return "output"
    if "log-softmax" in core:
        raise NnetError(f"{path}: a log-softmax inside the network (layer '{spec['name']}') is not supported")
    return "-".join(core) or "affine"


def to_ours(knet, path):
    """Our Nnet (and the final.mdl's priors, or None) computing what ``knet`` computes in test mode."""
    layers = _layers(_chain(knet, path), path)
    specs = []
    for i, (spec, offsets, members) in enumerate(layers):
        entry = {**spec, "type": _parts(spec, members, i == len(layers) - 1, path)}
        if i > 0:
            entry["splice"] = offsets
        dropout = next((c for _, c in members if c.kind.endswith("DropoutComponent")), None)
        if dropout is not None:
            entry["dropout-proportion"] = _f32(dropout.proportion)
        specs.append(entry)
    raw = {"input-dim": knet.inputs["input"], "splice": layers[0][1], "layers": specs}
    try:
        net = Nnet(config_mod.normalize(raw, f"{path}: the model it makes"))
    except NnetError as e:
        raise NnetError(f"{e}") from None
    _fill(net, layers, path)
    priors = knet.priors if knet.priors is not None and len(knet.priors) else None
    return net, priors


@torch.no_grad()
def _fill(net, layers, path):
    scale_next = 1.0  # a Kaldi DropoutComponent's test-mode scale, folded into the next affine
    for layer, (_, _, members) in zip(net.layers, layers):
        affine = members[0][1]
        layer.affine.weight.copy_(torch.from_numpy(np.asarray(affine.linear, np.float64) * scale_next))
        layer.affine.bias.copy_(torch.from_numpy(np.asarray(affine.bias, np.float64)))
        scale_next = 1.0
        post = iter(layer.post)
        for name, c in members[1:]:
            if c.kind == "FixedScaleComponent":
                net.set_presoftmax_scale(np.asarray(c.scales, np.float32))
                continue
            part = next(post)
            if isinstance(part, Nonlinearity):
                _fill_stats(part, c)
            elif isinstance(part, BatchNorm):
                _fill_batchnorm(part, c, name, path)
            elif c.kind == "DropoutComponent":
                scale_next = 1.0 - float(c.proportion)


def _fill_stats(part, c):
    count, ocount = float(c.count), float(c.oderiv_count)
    dim = part.value_sum.shape[0]
    for buf, values, n in ((part.value_sum, c.value_avg, count), (part.deriv_sum, c.deriv_avg, count),
                           (part.oderiv_sumsq, None if c.oderiv_rms is None else np.square(c.oderiv_rms), ocount)):
        if values is not None and len(values) == dim and n > 0:
            buf.copy_(torch.from_numpy(np.asarray(values, np.float64) * n))
    part.count.fill_(count if c.value_avg is not None and len(c.value_avg) == dim else 0.0)
    part.oderiv_count.fill_(ocount if c.oderiv_rms is not None and len(c.oderiv_rms) == dim else 0.0)


def _fill_batchnorm(part, c, name, path):
    if c.count <= 0:
        raise NnetError(f"{path}: component '{name}' (BatchNormComponent) has no statistics (<Count> 0)")
    var = (np.maximum(np.asarray(c.var, np.float64), 0.0) + c.epsilon) / c.target_rms ** 2 - part.eps
    if (var < 0).any():
        raise NnetError(f"{path}: component '{name}': its epsilon {c.epsilon:g} and target-rms {c.target_rms:g} "
                        f"cannot be expressed with torch's epsilon {part.eps:g}")
    part.running_mean.copy_(torch.from_numpy(np.asarray(c.mean, np.float64)))
    part.running_var.copy_(torch.from_numpy(var))
    part.num_batches_tracked.fill_(int(min(c.count, 2 ** 62)))
