"""What nnet3-info prints about a model, in its line shapes.

Context, ``num-parameters``, the node lines (``input-node name=input dim=40``, ``component-node``,
``output-node name=output ... dim=10``) and one ``component name=... type=...Component, ...`` line
per component, the nonlinearities with their training statistics summarised as Kaldi's
SummarizeVector does. nnet3_dir_info.pl reads the first kind, log_parse.py's
parse_progress_logs_for_nonlinearity_stats the last, from log/progress.N.log.
"""
import math

import numpy as np
import torch
from torch import nn

from nnet_tools.model.nnet import BatchNorm
from nnet_tools.model.nonlinearity import Nonlinearity

PERCENTILES = (0, 1, 2, 5, 10, 20, 50, 80, 90, 95, 98, 99, 100)


def succinct(f):
    """Kaldi's PrintFloatSuccinctly (nnet-parse.cc)."""
    f = float(np.float32(f))
    if 10.0 <= abs(f) < 10000.0:
        return f"{f:.0f}"
    if abs(f) >= 0.995:
        return f"{f:.1f}"
    if abs(f) >= 0.01:
        return f"{f:.2f}"
    return f"{f:.1g}"


def summarize_vector(vec):
    """Kaldi's SummarizeVector: under 10 values, all of them; else 13 percentiles (the sorted
    value at index (n-1)*p//100), the mean and the standard deviation over dimensions."""
    vec = np.asarray(vec, dtype=np.float32).ravel()
    if len(vec) < 10:
        return "[ " + "".join(succinct(v) + " " for v in vec) + "]"
    mean = float(vec.astype(np.float64).mean())
    stddev = math.sqrt(max(0.0, float((vec.astype(np.float64) ** 2).mean()) - mean * mean))
    ordered, n = np.sort(vec), len(vec) - 1
    values = ""
    for i, p in enumerate(PERCENTILES):
        values += succinct(ordered[n * p // 100])
        if i + 1 < len(PERCENTILES):
            values += " " if i in (3, 8) else ","
    return (f"[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=({values}), "
            f"mean={mean:.3g}, stddev={stddev:.3g}]")


def nonlinearity_info(part, dim):
    """NonlinearComponent::Info: the statistics appear once a training job has stored some."""
    text = f"{part.kaldi_type}, dim={dim}"
    value, deriv, oderiv = part.averages()
    if value is not None:
        text += (f", count={float(part.count):.3g}, self-repaired-proportion=0, "
                 f"value-avg={summarize_vector(value)}, deriv-avg={summarize_vector(deriv)}")
    if oderiv is not None:
        text += f", oderiv-rms={summarize_vector(oderiv)}, oderiv-count={float(part.oderiv_count):g}"
    return text


def _parameter_stats(name, t, include_mean):
    """PrintParameterStats: rms, or {mean,stddev}, to 4 significant digits."""
    t = t.detach().double()
    if include_mean:
        mean = t.mean().item()
        return f", {name}-{{mean,stddev}}={mean:.4g},{math.sqrt(max(0.0, t.pow(2).mean().item() - mean * mean)):.4g}"
    return f", {name}-rms={t.pow(2).mean().sqrt().item():.4g}"


def affine_info(affine):
    """(NaturalGradient)AffineComponent::Info, without the learning rate (a job option here)."""
    dout, din = affine.weight.shape
    kind = "NaturalGradientAffineComponent" if affine.ng_mode else "AffineComponent"
    text = f"{kind}, input-dim={din}, output-dim={dout}"
    if affine.l2_regularize:
        text += f", l2-regularize={affine.l2_regularize:g}"
    if affine.learning_rate_factor != 1.0:
        text += f", learning-rate-factor={affine.learning_rate_factor:g}"
    if affine.max_change > 0:
        text += f", max-change={affine.max_change:g}"
    w = affine.weight.detach()
    text += _parameter_stats("linear-params", w, False)
    text += f", linear-params-row-norms={summarize_vector(w.norm(dim=1).cpu().numpy())}"
    text += f", linear-params-col-norms={summarize_vector(w.norm(dim=0).cpu().numpy())}"
    text += _parameter_stats("bias", affine.bias, True)
    pre = affine.pre_in
    if affine.ng_mode == "simple":
        text += ", natural-gradient=simple"
    elif pre is not None:
        text += (f", rank-in={pre.rank}, rank-out={affine.pre_out.rank}, "
                 f"num-samples-history={pre.num_samples_history:g}, update-period={pre.update_period}, "
                 f"alpha={pre.alpha:g}")
    return text


def _part_info(part, dim):
    if isinstance(part, Nonlinearity):
        return nonlinearity_info(part, dim)
    if isinstance(part, BatchNorm):
        return (f"BatchNormComponent, dim={dim}, block-dim={dim}, epsilon={part.eps:g}, target-rms=1, "
                f"test-mode=false, data-mean={summarize_vector(part.running_mean.cpu().numpy())}, "
                f"data-stddev={summarize_vector(part.running_var.clamp(min=0).sqrt().cpu().numpy())}")
    if isinstance(part, nn.Dropout):
        return f"DropoutComponent, dim={dim}, dropout-proportion={part.p:g}, dropout-per-frame=false"
    return f"LogSoftmaxComponent, dim={dim}"


def _part_name(part):
    if isinstance(part, Nonlinearity):
        return part.kind
    if isinstance(part, BatchNorm):
        return "batchnorm"
    if isinstance(part, nn.Dropout):
        return "dropout"
    return "log-softmax"


def _descriptor(node, offsets):
    """nnet3's descriptor for a node read at time offsets: node, Offset(node, o), Append(...)."""
    parts = [node if o == 0 else f"Offset({node}, {o})" for o in offsets]
    return parts[0] if len(parts) == 1 else f"Append({', '.join(parts)})"


@torch.no_grad()
def info_lines(net):
    """nnet3-info's lines for ``net`` (Nnet::Info)."""
    lines = [f"left-context: {net.left_context}", f"right-context: {net.right_context}",
             f"num-parameters: {sum(p.numel() for p in net.parameters())}", "modulus: 1",
             f"input-node name=input dim={net.input_dim}"]
    components, node, din = [], "input", net.input_dim
    for layer, offsets in zip(net.layers, net.offsets):
        dim = layer.affine.weight.shape[0]
        chain = [(f"{layer.name}.affine", affine_info(layer.affine), _descriptor(node, offsets),
                  din * len(offsets))]
        if layer.presoftmax_scale is not None:  # Kaldi's FixedScaleComponent before the softmax
            chain.append((f"{layer.name}.fixed-scale", f"FixedScaleComponent, input-dim={dim}, output-dim={dim}"
                          + _parameter_stats("scales", layer.presoftmax_scale, True), None, dim))
        chain += [(f"{layer.name}.{_part_name(part)}", _part_info(part, dim), None, dim) for part in layer.post]
        for name, info, descriptor, input_dim in chain:
            lines.append(f"component-node name={name} component={name} input={descriptor or node} "
                         f"input-dim={input_dim} output-dim={dim}")
            components.append(f"component name={name} type={info}")
            node = name
        din = dim
    lines.append(f"output-node name=output input={node} dim={net.output_dim} objective=linear")
    return lines + components
