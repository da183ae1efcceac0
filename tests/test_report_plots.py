"""nnet-report --plots: PNGs and index.html of several exp dirs, holding the logs' numbers."""
import os
import re

import numpy as np
import pytest

from helpers import error_line, run
from nnet_tools.errors import NnetError
from nnet_tools.report import logparse

matplotlib = pytest.importorskip("matplotlib")
from matplotlib import image  # noqa: E402

from nnet_tools.report import plots  # noqa: E402

POINTS = "0,1,2,5 10,20,50,80,90 95,98,99,100"
LAYERS = ("tdnn1.affine", "output.affine")
COMPONENTS = {"tdnn1.relu": "RectifiedLinear", "tdnn1.batchnorm_in": "Sigmoid"}


def summary_text(values):
    """Kaldi's '[percentiles(...)=(...), mean=m, stddev=s]' for 13 sorted values."""
    v = " ".join(",".join(f"{x:.6g}" for x in group) for group in (values[:4], values[4:9], values[9:]))
    return f"[percentiles({POINTS})=({v}), mean={np.mean(values):.6g}, stddev={np.std(values):.6g}]"


def write_exp(d, iters, jobs, seed, oderiv=True):
    """An exp dir's logs in the shapes Kaldi prints (reference/kaldi-report-lines.md), with
    random numbers; returns what they hold, as the test wrote it."""
    rng = np.random.default_rng(seed)
    log = d / "log"
    log.mkdir(parents=True)
    truth = {"accuracy": {}, "log-likelihood": {}, "relative": {}, "absolute": {}, "nonlin": {}, "jobs": {},
             "lrate": {}, "frames": {}}
    for it in range(iters):
        for subset in ("train", "valid"):
            acc, ll = float(f"{rng.uniform(0.3, 1):.6g}"), float(f"{-rng.uniform(0.05, 2):.6g}")
            truth["accuracy"][subset, it], truth["log-likelihood"][subset, it] = acc, ll
            header = "LOG (nnet3-compute-prob[5.5.1067~1-4a8d]:PrintTotalStats():nnet-diagnostics.cc:194)"
            (log / f"compute_prob_{subset}.{it}.log").write_text(
                f"# nnet3-compute-prob 0.mdl ark:valid.egs\n"
                f"{header} Overall log-likelihood for 'output' is {ll} per frame, over 200 frames.\n"
                f"{header} Overall accuracy for 'output' is {acc} per frame, over 200 frames.\n")
        n, lrate = jobs(it), float(f"{rng.uniform(1e-4, 1e-2):.8g}")
        truth["jobs"][it], truth["lrate"][it] = n, lrate
        for j in range(1, n + 1):
            frames = truth["frames"][it, j] = int(rng.integers(100, 5000))
            (log / f"train.{it}.{j}.log").write_text(
                f"# nnet-train-one-job --learning-rate={lrate} --job={j} {it}.mdl egs {it + 1}.{j}.mdl\n"
                f"LOG (nnet-train-one-job[0.1.0]:log_total():job.py:117) Overall average objective function for "
                f"'output' is -0.68 over {frames} frames.\n"
                f"# Accounting: time={int(rng.integers(1, 9))} threads=1\n# Ended (code 0)\n")
        if it == 0:
            continue
        lines = [f"# nnet-show-progress {it - 1}.mdl {it}.mdl"]
        for kind, phrase in (("absolute", "Parameter differences"), ("relative", "Relative parameter differences")):
            diffs = {layer: float(f"{rng.uniform(0, 1):.6g}") for layer in LAYERS}
            for layer, value in diffs.items():
                truth[kind][layer, it] = value
            body = " ".join(f"{layer}:{value}" for layer, value in diffs.items())
            lines.append(f"LOG (nnet3-show-progress[5.5]:main():nnet3-show-progress.cc:144) {phrase} per layer are [ {body} ]")
        lines += ["num-parameters: 12345", "output-node name=output input=output.log-softmax dim=4 objective=linear"]
        for name, kind in COMPONENTS.items():
            # nnet3-info prints every component; only nonlinearities carry the statistics.
            lines.append(f"component name={name}.affine type=NaturalGradientAffineComponent, input-dim=6, "
                         "output-dim=16, linear-params-rms=0.1")
            stats = {key: np.sort(rng.uniform(0, 1, 13)) for key in ("value-avg", "deriv-avg", "oderiv-rms")}
            for key, values in stats.items():
                truth["nonlin"][name, key, it] = (float(f"{np.mean(values):.6g}"), float(f"{values[3]:.6g}"),
                                                  float(f"{values[9]:.6g}"))
            lines.append(f"component name={name} type={kind}Component, dim=16, self-repair-scale=1e-05, count=2.5e+03, "
                         f"value-avg={summary_text(stats['value-avg'])}, deriv-avg={summary_text(stats['deriv-avg'])}"
                         + (f", oderiv-rms={summary_text(stats['oderiv-rms'])}" if oderiv else ""))
        (log / f"progress.{it}.log").write_text("\n".join(lines) + "\n")
    return truth


@pytest.fixture
def two_exps(tmp_path):
    a = write_exp(tmp_path / "exp" / "a", 6, lambda it: 2 + it // 2, seed=1)
    b = write_exp(tmp_path / "exp" / "b", 4, lambda it: 3, seed=2, oderiv=False)
    return tmp_path, {"exp/a": a, "exp/b": b}


def test_nonlinearity_line_in_kaldi_shape(tmp_path):
    line = ("component name=tdnn1.relu type=RectifiedLinearComponent, dim=512, self-repair-scale=1e-05, "
            "count=2.56e+05, self-repaired-proportion=0.001, value-avg=[percentiles(0,1,2,5 10,20,50,80,90 "
            "95,98,99,100)=(0.01,0.02,0.03,0.05 0.1,0.2,0.4,0.7,0.9 1.0,1.1,1.2,1.3), mean=0.41, stddev=0.22], "
            "deriv-avg=[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=(0,0.1,0.2,0.3 0.4,0.5,0.6,0.7,0.8 "
            "0.85,0.9,0.95,1), mean=0.58, stddev=0.2]")
    (tmp_path / "progress.3.log").write_text(f"LOG (nnet3-info) whatever\n{line}\n"
                                             "component name=output.affine type=NaturalGradientAffineComponent, "
                                             "input-dim=512, output-dim=10\n")
    stats = logparse.nonlinearity_stats(tmp_path / "progress.3.log")
    assert list(stats) == ["tdnn1.relu"]
    relu = stats["tdnn1.relu"]
    assert relu["type"] == "RectifiedLinear" and "oderiv-rms" not in relu
    assert relu["value-avg"]["mean"] == 0.41 and relu["value-avg"]["stddev"] == 0.22
    assert relu["value-avg"]["percentiles"][5.0] == 0.05 and relu["value-avg"]["percentiles"][95.0] == 1.0
    assert relu["deriv-avg"]["percentiles"][50.0] == 0.6 and relu["deriv-avg"]["mean"] == 0.58


def test_plotted_numbers_equal_the_logs(two_exps, monkeypatch):
    root, truth = two_exps
    monkeypatch.chdir(root)
    drawn = plots.write_plots("plots", list(truth))
    expected = ({"accuracy.png", "log-likelihood.png", "jobs_lrate.png"}
                | {f"param_diff_{layer}.png" for layer in LAYERS} | {f"nonlin_{c}.png" for c in COMPONENTS})
    assert set(drawn) == expected
    for exp, t in truth.items():
        for key in ("accuracy", "log-likelihood"):
            for subset in ("train", "valid"):
                xs, ys = drawn[f"{key}.png"][f"{subset} {exp}"]
                assert [(subset, x) for x in xs] == sorted(k for k in t[key] if k[0] == subset)
                assert ys == [t[key][subset, x] for x in xs]
        for layer in LAYERS:
            for kind in ("absolute", "relative"):
                xs, ys = drawn[f"param_diff_{layer}.png"][f"{kind} {exp}"]
                assert xs == list(range(1, len(t["jobs"]))) and ys == [t[kind][layer, x] for x in xs]
        xs, ys = drawn["jobs_lrate.png"][f"jobs {exp}"]
        assert xs == sorted(t["jobs"]) and ys == [t["jobs"][x] for x in xs]
        assert drawn["jobs_lrate.png"][f"learning rate {exp}"][1] == [t["lrate"][x] for x in xs]
        for component in COMPONENTS:
            lines = drawn[f"nonlin_{component}.png"]
            for key in ("value-avg", "deriv-avg", "oderiv-rms"):
                if exp == "exp/b" and key == "oderiv-rms":     # exp b's progress logs have none
                    assert f"{key} mean {exp}" not in lines
                    continue
                xs, ys = lines[f"{key} mean {exp}"]
                assert ys == [t["nonlin"][component, key, x][0] for x in xs] and xs[0] == 1


def test_plotted_against_samples(two_exps, monkeypatch):
    """--x-axis samples: iteration i's point at the frames iterations 0..i-1 trained on, summed
    over their jobs; from the first iteration a job's log lacks its frame count, no points."""
    root, truth = two_exps
    monkeypatch.chdir(root)
    (root / "exp/a/log/train.3.2.log").write_text("# nnet-train-one-job --learning-rate=0.001 3.mdl egs 4.2.mdl\n")
    drawn = plots.write_plots("plots", list(truth), x_axis="samples")
    for exp, t in truth.items():
        before = [sum(f for (it, _), f in t["frames"].items() if it < i) for i in range(len(t["jobs"]) + 1)]
        known = 4 if exp == "exp/a" else len(t["jobs"])     # exp a: iteration 3 is incomplete
        xs, ys = drawn["accuracy.png"][f"valid {exp}"]
        assert xs == before[:known] and ys == [t["accuracy"]["valid", i] for i in range(known)]
        xs, _ = drawn[f"param_diff_{LAYERS[0]}.png"][f"relative {exp}"]
        assert xs == before[1:known]
    with pytest.raises(NnetError, match="x axis must be"):
        plots.write_plots("plots", list(truth), x_axis="epochs")


def test_program_writes_pngs_and_index(two_exps):
    root, truth = two_exps
    r = run("nnet-report", "--plots", "out", *truth, cwd=root, check=True)
    pngs = sorted(p for p in os.listdir(root / "out") if p.endswith(".png"))
    assert len(pngs) == 3 + len(LAYERS) + len(COMPONENTS) and f"Wrote {len(pngs)} plots" in r.stdout
    for name in pngs:
        pixels = image.imread(root / "out" / name)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0.01, name
    index = (root / "out" / "index.html").read_text()
    assert sorted(re.findall(r'<img src="([^"]+)"', index)) == pngs
    assert "exp/a: num-iters=" in index and "%Iter\tduration" in index
    assert [p for p in os.listdir(root / "out") if p.startswith(".tmp")] == []


def test_without_matplotlib_one_line(two_exps, tmp_path):
    root, truth = two_exps
    blocker = tmp_path / "no-mpl" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env_path = f"{blocker.parent}:{os.environ.get('PYTHONPATH', '')}"
    import subprocess
    r = subprocess.run(["nnet-report", "--plots", "out", *truth], cwd=root, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": env_path})
    assert "matplotlib" in error_line(r) and "Traceback" not in r.stderr
    assert not (root / "out").exists()


def test_an_unwritable_home_gets_no_warnings_and_leaves_no_temp_dir(two_exps, tmp_path):
    """matplotlib warned (two lines) and left a matplotlib-* dir in /tmp on every run. /proc is not
    writable even for root, so HOME there is unwritable for whoever runs the tests."""
    root, truth = two_exps
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME")}
    import subprocess
    r = subprocess.run(["nnet-report", "--plots", "out", *truth], cwd=root, capture_output=True, text=True,
                       env={**env, "HOME": "/proc/no-home", "TMPDIR": str(tmp)})
    assert r.returncode == 0 and "matplotlib" not in r.stderr.lower(), r.stderr
    assert (root / "out" / "index.html").exists() and list(tmp.iterdir()) == []


def test_not_an_exp_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty'}" in error_line(run("nnet-report", "--plots", tmp_path / "p", tmp_path / "empty"))
    with pytest.raises(NnetError, match="no compute_prob or train logs under"):
        plots.write_plots(str(tmp_path / "p"), [str(tmp_path / "empty")])
    assert not (tmp_path / "p").exists()
