"""Lattice posteriors (Kaldi's lattice-to-post, nnet_tools/speech/search/lattice_posteriors.py):
per-frame transition-id posteriors equal the sum over the lattice's paths enumerated one by one,
on random lattices whose arcs carry 0-3 transition-ids; nnet-lattice-to-post writes them as a
Kaldi Posterior table with lattice-to-post's log lines; bad lattices and options as one line."""
import kaldi_hmm_gmm  # noqa: F401  before kaldifst/kaldi_decoder (nnet_tools/speech/__init__.py)

import math

import numpy as np
import pytest

from helpers import error_line, run
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.speech.search import lattice_io, lattice_posteriors
from nnet_tools.speech.search.compact_lattice import CompactLattice


def random_lattice(rng, num_frames=7, per_frame=3):
    """States in layers by frame; arcs jump 0-3 frames forward with random costs and tids (0 frames:
    a word arc without frames, to a later state of the same layer), each state with at least one
    arc to the next frame; final states at the last frame, and one a frame earlier with a final
    string of one tid."""
    layers = [[t * per_frame + k for k in range(per_frame)] for t in range(num_frames + 1)]
    n = (num_frames + 1) * per_frame
    arcs, finals = [[] for _ in range(n)], [None] * n
    for t, layer in enumerate(layers):
        for i, s in enumerate(layer):
            for k in range(int(rng.integers(1, 3)) + (t < num_frames)):
                step = 1 if k == 0 and t < num_frames else int(rng.integers(0, 4))
                if step == 0 and i == len(layer) - 1 or t + step > num_frames:
                    continue
                targets = layer[i + 1:] if step == 0 else layers[t + step]
                nxt = int(rng.choice(targets))
                tids = tuple(int(x) for x in rng.integers(1, 6, size=step))
                arcs[s].append((nxt, int(rng.integers(0, 3)), float(rng.normal()), float(rng.normal() * 5), tids))
    for s in layers[num_frames]:
        finals[s] = (float(rng.normal()), float(rng.normal()), ())
    finals[layers[num_frames - 1][1]] = (-0.25, 2.0, (4,))
    return CompactLattice(0, arcs, finals)


def paths(lat, s=None, prefix=()):
    """Every complete path: (graph cost, acoustic cost, tids)."""
    s = lat.start if s is None else s
    out = []
    if lat.finals[s] is not None:
        g, a, tids = lat.finals[s]
        out.append((sum(p[0] for p in prefix) + g, sum(p[1] for p in prefix) + a,
                    tuple(t for p in prefix for t in p[2]) + tids))
    for nxt, _, g, a, tids in lat.arcs[s]:
        out += paths(lat, nxt, prefix + ((g, a, tids),))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_posteriors_are_the_sum_over_the_paths(seed):
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng)
    ac, lm = 0.3, 0.8
    every = paths(lat)
    assert len(every) > 3
    scores = np.array([-(lm * g + ac * a) for g, a, _ in every])
    total = np.logaddexp.reduce(scores)
    want = {}
    for (g, a, tids), score in zip(every, scores):
        for t, tid in enumerate(tids):
            want[(t, tid)] = want.get((t, tid), 0.0) + math.exp(score - total)
    got = lattice_posteriors.forward_backward(lat, ac, lm)
    assert got.log_like == pytest.approx(total, abs=1e-9)
    assert got.acoustic_like == pytest.approx(sum(-ac * a * math.exp(s - total) for (_, a, _), s in zip(every, scores)))
    assert {(t, tid): p for t, frame in enumerate(got.post) for tid, p in frame} == pytest.approx(want, abs=1e-12)
    for frame in got.post:
        assert [tid for tid, _ in frame] == sorted({tid for tid, _ in frame})   # merged, sorted
        assert sum(p for _, p in frame) == pytest.approx(1.0)


def test_one_path_has_posterior_one_and_no_path_none():
    lat = CompactLattice(0, [[(1, 5, 1.0, 2.0, (3, 3, 4))], []], [None, (0.0, 0.0, (7,))])
    got = lattice_posteriors.forward_backward(lat, 0.1)
    assert got.post == [[(3, 1.0)], [(3, 1.0)], [(4, 1.0)], [(7, 1.0)]]
    assert got.log_like == pytest.approx(-(1.0 + 0.1 * 2.0))
    assert lattice_posteriors.forward_backward(CompactLattice(0, [[(1, 5, 1.0, 2.0, (3,))], []], [None, None])) is None
    assert lattice_posteriors.forward_backward(CompactLattice(0, [], [])) is None


def test_inconsistent_lattices_are_refused():
    two_times = CompactLattice(0, [[(1, 1, 0.0, 0.0, (1,)), (2, 1, 0.0, 0.0, (1, 2))], [(2, 1, 0.0, 0.0, ())], []],
                               [None, None, (0.0, 0.0, ())])
    with pytest.raises(NnetError, match="utt1: state 2 is reached at frames 2 and 1"):
        lattice_posteriors.forward_backward(two_times, where="utt1")
    ends = CompactLattice(0, [[(1, 1, 0.0, 0.0, (1,)), (2, 1, 0.0, 0.0, (1, 2))], [], []],
                          [None, (0.0, 0.0, ()), (0.0, 0.0, ())])
    with pytest.raises(NnetError, match=r"final states end at different frames \[1, 2\]"):
        lattice_posteriors.forward_backward(ends)


def test_lattice_to_post_program(tmp_path):
    rng = np.random.default_rng(3)
    lats = {"u1": random_lattice(rng), "u2": random_lattice(rng, num_frames=5),
            "u3": CompactLattice(0, [[(1, 5, 1.0, 2.0, (3,))], []], [None, None])}
    (tmp_path / "lat.txt").write_text("".join(lattice_io.format_lattice(k, v) for k, v in lats.items()))
    r = run("nnet-lattice-to-post", "--acoustic-scale", "0.5", f"ark:{tmp_path}/lat.txt", f"ark:{tmp_path}/post.ark",
            check=True)
    assert r.stderr.splitlines()[0].startswith("nnet-lattice-to-post --acoustic-scale 0.5 ")
    assert "Lattice for utterance u3 has no path to a final state" in r.stderr
    got = dict(tables.read_posteriors(f"ark:{tmp_path}/post.ark"))
    assert list(got) == ["u1", "u2"]
    frames = 0
    like = 0.0
    for key in got:
        want = lattice_posteriors.forward_backward(lats[key], 0.5)
        assert len(got[key]) == len(want.post)
        for g, w in zip(got[key], want.post):
            assert [t for t, _ in g] == [t for t, _ in w]
            np.testing.assert_allclose([p for _, p in g], [p for _, p in w], rtol=1e-6)   # float in the table
        frames += len(want.post)
        like += want.log_like
    assert f"Overall average log-like/frame is {like / frames:.6g} over {frames} frames." in r.stderr
    assert "Done 2 lattices." in r.stderr
    line = error_line(run("nnet-lattice-to-post", "--acoustic-scale", "0", f"ark:{tmp_path}/lat.txt", "ark:/dev/null"))
    assert "--acoustic-scale: do not use a zero acoustic scale" in line
    (tmp_path / "none.txt").write_text(lattice_io.format_lattice("u3", lats["u3"]))
    r = run("nnet-lattice-to-post", f"ark:{tmp_path}/none.txt", f"ark:{tmp_path}/none.ark")
    assert r.returncode == 1 and "no lattice gave posteriors (1 without a final state)" in error_line(r)
    assert not (tmp_path / "none.ark").exists()
