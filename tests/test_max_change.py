import math

import pytest
import torch

from nnet_tools.train.max_change import apply_update, max_change_factors


def test_per_component_then_global_rule():
    norms = torch.tensor([3.0, 0.5, 4.0], dtype=torch.float64)
    limits = torch.tensor([0.75, 0.75, 0.0], dtype=torch.float64)  # last: no per-component limit
    r = max_change_factors(norms, limits, max_param_change=2.0)
    assert r.factors.tolist() == pytest.approx([0.25, 1.0, 1.0])
    total = math.sqrt(0.75 ** 2 + 0.5 ** 2 + 4.0 ** 2)
    assert r.global_factor == pytest.approx(2.0 / total)
    assert r.scale == pytest.approx(2.0 / total)
    assert r.applied


def test_scale_enters_both_limits():
    # With momentum the update is applied with s = 1 - m; the limits compare |s| * d.
    r = max_change_factors(torch.tensor([1.0], dtype=torch.float64), torch.tensor([0.75], dtype=torch.float64), 2.0, 0.5)
    assert r.factors.item() == 1.0 and r.scale == 0.5
    r = max_change_factors(torch.tensor([2.0], dtype=torch.float64), torch.tensor([0.75], dtype=torch.float64), 2.0, 0.5)
    assert r.factors.item() == pytest.approx(0.75)


def test_no_limits_no_change_and_nonfinite_skips():
    r = max_change_factors(torch.tensor([1.0, 1.0], dtype=torch.float64), torch.zeros(2, dtype=torch.float64), 0.0)
    assert r.factors.tolist() == [1.0, 1.0] and r.scale == 1.0
    r = max_change_factors(torch.tensor([math.inf], dtype=torch.float64), torch.zeros(1, dtype=torch.float64), 2.0)
    assert not r.applied and r.scale == 0.0


class Comp:
    def __init__(self, max_change):
        self.max_change = max_change


def test_apply_update_changes_params_by_the_limited_amount():
    w, b = torch.zeros(3, 4), torch.zeros(3)
    delta = [torch.full((3, 4), 1.0), torch.full((3,), 1.0)]  # norm sqrt(15)
    r = apply_update([(Comp(0.75), [w, b])], [delta], max_param_change=2.0)
    change = torch.sqrt((w ** 2).sum() + (b ** 2).sum()).item()
    assert change == pytest.approx(0.75, rel=1e-5)
    assert r.factors.item() == pytest.approx(0.75 / math.sqrt(15))


def test_apply_update_skips_nonfinite():
    w = torch.zeros(2)
    r = apply_update([(Comp(0.0), [w])], [[torch.tensor([math.nan, 1.0])]], max_param_change=2.0)
    assert not r.applied and torch.equal(w, torch.zeros(2))


def test_coefficients_scale_the_raw_deltas_without_copying_them():
    """apply_update(grads, coefficients=k) moves the parameters exactly as the deltas k * grads
    would, limits included, and leaves the gradients untouched."""
    g = torch.Generator().manual_seed(0)
    grads = [[torch.randn(4, 3, generator=g), torch.randn(4, generator=g)], [torch.randn(2, 4, generator=g)]]
    k = [-0.3, -0.05]
    comps_a = [(Comp(0.75), [torch.zeros(4, 3), torch.zeros(4)]), (Comp(0.0), [torch.zeros(2, 4)])]
    comps_b = [(Comp(0.75), [torch.zeros(4, 3), torch.zeros(4)]), (Comp(0.0), [torch.zeros(2, 4)])]
    kept = [[t.clone() for t in ts] for ts in grads]
    ra = apply_update(comps_a, grads, 0.5, coefficients=k)
    rb = apply_update(comps_b, [[kc * t for t in ts] for kc, ts in zip(k, grads)], 0.5)
    assert all(torch.equal(a, b) for ta, tb in zip(grads, kept) for a, b in zip(ta, tb))
    torch.testing.assert_close(ra.factors, rb.factors)
    assert ra.global_factor == pytest.approx(rb.global_factor) and ra.global_factor < 1  # both limits active
    for (_, pa), (_, pb) in zip(comps_a, comps_b):
        for a, b in zip(pa, pb):
            torch.testing.assert_close(a, b)
