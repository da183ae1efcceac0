"""Kaldi's UpdateNnetWithMaxChange (src/nnet3/nnet-utils.cc).

Per updatable component c with max-change m_c: f_c = min(1, sigma m_c / (|s| d_c)) where d_c is
the Frobenius norm of its (already lr-scaled) delta. Globally D = |s| sqrt(sum f_c^2 d_c^2); if
D > sigma M the scale s shrinks by sigma M / D, and a non-finite D skips the update altogether.
sigma (Kaldi's max_change_scale) is 1 except in backstitch, where it is alpha or 1 + alpha.
"""
import math
from dataclasses import dataclass

import torch


@dataclass
class MaxChangeResult:
    factors: torch.Tensor   # per-component f_c
    scale: float            # final s (0 if the update was skipped)
    global_factor: float    # M / D when the global limit was active, else 1
    applied: bool           # False for a non-finite change


def max_change_factors(norms, max_changes, max_param_change, scale=1.0, max_change_scale=1.0):
    """norms: [C] tensor of d_c; max_changes: [C] tensor of m_c (0 = none)."""
    s = abs(scale)
    if max_change_scale != 1.0:
        max_changes = max_changes * max_change_scale
        max_param_change = max_param_change * max_change_scale
    limited = (max_changes > 0) & (norms * s > max_changes)
    factors = torch.where(limited, max_changes / (norms * s).clamp_min(1e-30), torch.ones_like(norms))
    total = s * torch.sqrt(((factors * norms) ** 2).sum()).item()
    if not torch.isfinite(torch.tensor(total)):
        return MaxChangeResult(factors, 0.0, 1.0, False)
    global_factor = max_param_change / total if 0 < max_param_change < total else 1.0
    return MaxChangeResult(factors, scale * global_factor, global_factor, True)


@torch.no_grad()
def apply_update(components, deltas, max_param_change, scale=1.0, max_change_scale=1.0, coefficients=None):
    """Add f_c * s * delta_c to each component's parameters.

    components: list of (module with .max_change, [params]); deltas: matching list of [tensors].
    coefficients: optional per-component numbers k_c, the delta then being k_c * deltas[c]: a
    caller passes the raw gradients and -learning rate, and no lr-scaled copy of every
    gradient is made per minibatch. One host sync (the norms), one pass over the deltas for
    the norms and one fused multiply-add per parameter, as Kaldi's AddNnet with a scale.
    """
    flat = [d for ds in deltas for d in ds]
    tensor_norms = torch.stack(torch._foreach_norm(flat)).tolist() if flat else []
    k = [1.0] * len(deltas) if coefficients is None else [float(c) for c in coefficients]
    norms, i = [], 0
    for c, ds in enumerate(deltas):
        norms.append(abs(k[c]) * math.sqrt(sum(n * n for n in tensor_norms[i:i + len(ds)])))
        i += len(ds)
    limits = torch.tensor([float(m.max_change) for m, _ in components], dtype=torch.float64)
    result = max_change_factors(torch.tensor(norms, dtype=torch.float64), limits, max_param_change,
                                scale, max_change_scale)
    if result.applied:
        for (_, params), ds, f, k_c in zip(components, deltas, result.factors.tolist(), k):
            for p, d in zip(params, ds):
                p.add_(d, alpha=k_c * f * result.scale)
    return result
