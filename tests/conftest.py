"""Fixtures and hooks shared by the tests; what tests call or import lives in helpers.py."""
import fcntl
import os
import subprocess
import tempfile

import pytest

from helpers import SMALL_CONFIG, engines_state


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed cluster test's report ends with the engines' state at the failure."""
    report = (yield).get_result()
    if report.when == "call" and report.failed and item.get_closest_marker("cluster"):
        report.sections.append(("engines at the failure", engines_state()))


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


@pytest.fixture
def egs_info(tmp_path):
    """An egs dir of info/ only (8 archives, 1 frame per eg) and a two-eg combine.egs: what the
    driver reads of one when a RecordingLauncher (helpers.py) plays the jobs."""
    import numpy as np
    from nnet_tools.data import egs
    (tmp_path / "egs" / "info").mkdir(parents=True)
    for key, value in dict(num_archives=8, frames_per_eg=1).items():
        (tmp_path / "egs" / "info" / key).write_text(f"{value}\n")
    # The driver checks it is whole before any work; the recorder never reads it.
    egs.write_archive(str(tmp_path / "egs" / "combine.egs"), np.zeros((2, 3, 6), np.float32),
                      np.zeros((2, 1), np.int32), ["a", "b"], 1, 1)
    return tmp_path / "egs"
