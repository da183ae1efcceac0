import numpy as np
import pytest

from nnet_tools.errors import NnetError
from nnet_tools.train.minibatch import MinibatchRule, buffered_order


def test_fixed_size_discards_leftover():
    assert MinibatchRule("512").plan(1300, 11) == ([512, 512], 276)


def test_ranges_emit_largest_then_fit_leftovers():
    assert MinibatchRule("1:64").plan(130, 11) == ([64, 64, 2], 0)
    assert MinibatchRule("64,32").plan(150, 1) == ([64, 64], 22)
    assert MinibatchRule("64,16:32").plan(150, 1) == ([64, 64, 22], 0)


def test_rules_by_eg_size():
    rule = MinibatchRule("128=64:128,256/256=32:64,128")
    assert rule.sizes_for(100) == [(64, 128), (256, 256)]
    assert rule.sizes_for(300) == [(32, 64), (128, 128)]


@pytest.mark.parametrize("bad", ["0", "abc", "64:32", "a=3/4", "128=64/256"])
def test_bad_rules(bad):
    with pytest.raises(NnetError, match="minibatch|eg size|rule"):
        MinibatchRule(bad)


def test_buffered_order_is_a_permutation_with_limited_reach():
    rng = np.random.default_rng(0)
    order = buffered_order(1000, 50, rng)
    assert sorted(order.tolist()) == list(range(1000))
    # Output position p can only hold an eg that had arrived by then: index < p + buffer.
    assert all(idx < pos + 50 for pos, idx in enumerate(order))
    assert order.tolist() != list(range(1000))


def test_buffered_order_seeded_and_full_shuffle():
    a = buffered_order(100, 10, np.random.default_rng(3))
    b = buffered_order(100, 10, np.random.default_rng(3))
    assert a.tolist() == b.tolist()
    full = buffered_order(100, 0, np.random.default_rng(3))
    assert sorted(full.tolist()) == list(range(100))
