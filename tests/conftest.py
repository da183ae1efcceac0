"""Helpers shared by the program-level tests."""
import fcntl
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DIGITS_LEXICON = REPO / "recipes" / "spoken_digits" / "local" / "dict" / "lexicon.txt"


@pytest.fixture(autouse=True)
def _logger_state():
    """Programs run in process point the package logger at stderr and stop its propagation;
    put it back after each test, so a later test's caplog still sees warnings."""
    from nnet_tools.log import logger
    saved = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture(autouse=True)
def _one_serial_test_at_a_time(request):
    """The tests run in parallel (pytest-xdist, pyproject's addopts). Those marked cluster or
    serial use machine-wide state, the engines' few slots or /tmp/nnet-queue.gpu*.lock: an
    exclusive lock keeps any two of them from running at once, whichever workers hold them."""
    if not (request.node.get_closest_marker("cluster") or request.node.get_closest_marker("serial")):
        yield
        return
    # Read-only, so another account's lock file serves as well.
    fd = os.open(f"{tempfile.gettempdir()}/nnet-tools-tests.serial.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def error_line(result):
    """The one ERROR line of a rejected call (stderr's first line echoes the command line)."""
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def gone(pid):
    """Whether process ``pid`` has ended (a zombie not yet reaped counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def nan_archive(egs_dir, out, index=100):
    """egs_dir/egs.1.ark (from write_egs_dir) written to ``out`` with one NaN in eg ``index``."""
    from nnet_tools.data import egs
    a = egs.EgsArchive(egs_dir / "egs.1.ark")
    inputs = np.array(a.inputs)
    inputs[index, 1, 2] = np.nan
    egs.write_archive(out, inputs, np.array(a.labels), a.keys(), 1, 1)
    return out


def run(*argv, cwd=None, check=False):
    """Run a program; returns the CompletedProcess with text output."""
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd)
    if check and r.returncode:
        raise AssertionError(f"{argv} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


def write_egs_dir(path, num_archives=4, egs_per_archive=600, dim=6, classes=4, fpe=2, left=1, right=1, seed=0):
    """A small, learnable egs dir (class-dependent means) laid out as nnet-get-egs does."""
    from nnet_tools.data import egs
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)) * 2

    def make(n):
        labels = rng.integers(0, classes, (n, fpe)).astype(np.int32)
        inputs = rng.normal(size=(n, left + fpe + right, dim)).astype(np.float32)
        inputs[:, left:left + fpe] += centers[labels]
        return inputs, labels, [f"utt{i}-0" for i in range(n)]
    for k in range(1, num_archives + 1):
        egs.write_archive(path / f"egs.{k}.ark", *make(egs_per_archive), left, right)
    for name in ("valid_diagnostic", "train_diagnostic", "combine"):
        egs.write_archive(path / f"{name}.egs", *make(200), left, right)
    (path / "info").mkdir(parents=True, exist_ok=True)
    for key, value in dict(num_archives=num_archives, frames_per_eg=fpe, feat_dim=dim, left_context=left,
                           right_context=right, output_dim=classes).items():
        (path / "info" / key).write_text(f"{value}\n")
    return path


SMALL_CONFIG = """input-dim: 6
splice: -1:1
layers:
  - {name: hidden, type: relu-batchnorm, dim: 16}
  - {name: output, type: output, dim: 4}
"""


@pytest.fixture
def small_model(tmp_path):
    """(config path, model path) of a small NG model matching write_egs_dir's defaults: what
    `nnet-init --srand 1` writes, made in this process (a program's start is seconds of torch import)."""
    import torch
    from nnet_tools.model import config, model_io
    from nnet_tools.model.nnet import Nnet
    cfg = tmp_path / "model.yaml"
    cfg.write_text(SMALL_CONFIG)
    mdl = tmp_path / "0.mdl"
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model_io.save(Nnet(config.load(cfg)), mdl)
    return cfg, mdl


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, filled up; needs root (mount)."""
    if os.geteuid() != 0:
        pytest.skip("the disk-full cases mount a 1 MiB tmpfs, which needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        with open(mount / "filler", "wb") as f:
            try:
                f.write(b"\0" * (2 << 20))
            except OSError:
                pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def mono_model(lang_dir, lexicon=DIGITS_LEXICON):
    """A lang dir made from ``lexicon`` and a one-Gaussian-per-pdf model of 6-dim features on it."""
    from nnet_tools.speech import gmm, lang
    lang.prepare(str(lexicon), str(lang_dir))
    _, topo = lang.read_topology(str(lang_dir))
    return gmm.init_mono(topo, [np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)])
