import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers import SMALL_CONFIG, nan_archive, write_egs_dir
from nnet_tools.model import config
from nnet_tools.evaluate import diagnostics
from nnet_tools.data import egs
from nnet_tools.errors import NnetError
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import max_change
from nnet_tools.train.job import TrainOptions, train_one_job


def model(ng=True, seed=0):
    torch.manual_seed(seed)
    text = SMALL_CONFIG if ng else "natural-gradient: false\n" + SMALL_CONFIG
    return Nnet(config.normalize(config.yaml_load(text)))


@pytest.fixture(scope="module")
def egs_dir(tmp_path_factory):
    return write_egs_dir(tmp_path_factory.mktemp("egs"))


def valid_objf(net, egs_dir):
    windows, labels = egs.EgsArchive(egs_dir / "valid_diagnostic.egs").all_frames(net)
    s = diagnostics.compute_prob(net, windows, labels)
    return s.objf / s.frames, s.correct / s.frames


@pytest.mark.parametrize("ng", [True, False])
def test_training_improves_the_objective(egs_dir, ng):
    net = model(ng)
    before, _ = valid_objf(net, egs_dir)
    objf, frames = train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"),
                                 TrainOptions(learning_rate=0.01, minibatch_size="64"))
    after, accuracy = valid_objf(net, egs_dir)
    assert frames == 1152  # 600 egs of 2 frames in minibatches of 64 egs: 24 egs discarded
    assert after > before + 0.5 and accuracy > 0.9


def test_frame_selection_skips_egs_without_that_label(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, (50, 2)).astype(np.int32)
    labels[:20, 1] = -1  # short final chunks: no label at position 1
    egs.write_archive(tmp_path / "a.ark", rng.normal(size=(50, 4, 6)).astype(np.float32), labels,
                      [f"u{i}" for i in range(50)], 1, 1)
    archive = egs.EgsArchive(tmp_path / "a.ark")
    assert train_one_job(model(), archive, TrainOptions(learning_rate=1e-3, chunk=False, frame=1, minibatch_size="1:64"))[1] == 30
    assert train_one_job(model(), archive, TrainOptions(learning_rate=1e-3, chunk=False, frame=0, minibatch_size="1:64"))[1] == 50
    with pytest.raises(NnetError, match="--frame 2 out of range"):
        train_one_job(model(), archive, TrainOptions(learning_rate=1e-3, chunk=False, frame=2))


def test_max_param_change_bounds_every_step(egs_dir, monkeypatch):
    """Kaldi's global limit: a step that would change the parameters by more than --max-param-change
    changes them by exactly that much; a smaller one is applied as it is, as with no limit (0)."""
    steps = []   # the norm of each update's change to the parameters
    real = max_change.apply_update

    def measured(components, *args, **kwargs):
        before = [p.detach().double().clone() for _, ps in components for p in ps]
        result = real(components, *args, **kwargs)
        after = [p.detach().double() for _, ps in components for p in ps]
        steps.append(sum(((a - b) ** 2).sum().item() for a, b in zip(after, before)) ** 0.5)
        return result
    monkeypatch.setattr(max_change, "apply_update", measured)
    net = model()
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
    train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"),
                  TrainOptions(learning_rate=1.0, minibatch_size="100", max_param_change=1e-3))
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert 0 < (after - before).norm().item() <= 6 * 1e-3 * (1 + 1e-4)  # 6 minibatches
    assert steps == pytest.approx([1e-3] * 6, rel=1e-3)   # each one clipped to the limit, not below it

    def trained(max_param_change):
        steps.clear()
        net = model()
        train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"),
                      TrainOptions(learning_rate=0.01, minibatch_size="100", max_param_change=max_param_change))
        return torch.cat([p.detach().flatten() for p in net.parameters()]), list(steps)
    free, free_steps = trained(0.0)
    assert len(free_steps) == 6 and max(free_steps) > 1e-3
    limited, limited_steps = trained(1.01 * max(free_steps))   # above every step, if only just
    assert limited_steps == free_steps and torch.equal(limited, free)


def test_same_seed_same_model_other_seed_differs(egs_dir):
    def trained(srand):
        net = model()
        train_one_job(net, egs.EgsArchive(egs_dir / "egs.2.ark"), TrainOptions(learning_rate=0.002, srand=srand, minibatch_size="64"))
        return torch.cat([p.detach().flatten() for p in net.parameters()])
    assert torch.equal(trained(3), trained(3))
    assert not torch.equal(trained(3), trained(4))


def test_momentum_trains(egs_dir):
    net = model()
    before, _ = valid_objf(net, egs_dir)
    train_one_job(net, egs.EgsArchive(egs_dir / "egs.3.ark"), TrainOptions(learning_rate=0.01, momentum=0.5, minibatch_size="64"))
    assert valid_objf(net, egs_dir)[0] > before + 0.5


def test_egs_must_match_the_model(tmp_path):
    write_egs_dir(tmp_path, num_archives=1, egs_per_archive=10, dim=5)
    with pytest.raises(NnetError, match="feature dim 5 does not match the model's 6"):
        train_one_job(model(), egs.EgsArchive(tmp_path / "egs.1.ark"), TrainOptions(learning_rate=1e-3))
    write_egs_dir(tmp_path, num_archives=1, egs_per_archive=10, classes=9)
    with pytest.raises(NnetError, match="target id 8 >= model output dim 4"):
        train_one_job(model(), egs.EgsArchive(tmp_path / "egs.1.ark"), TrainOptions(learning_rate=1e-3))
    write_egs_dir(tmp_path, num_archives=1, egs_per_archive=10, left=0)
    with pytest.raises(NnetError, match="context"):
        train_one_job(model(), egs.EgsArchive(tmp_path / "egs.1.ark"), TrainOptions(learning_rate=1e-3))


def test_non_finite_objective_fails_the_job_naming_the_minibatch(tmp_path):
    # One NaN feature value: with natural gradient on, it would reach the Fisher
    # eigendecomposition too; the job names the objective, which went wrong first.
    nan_archive(write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=300), tmp_path / "nan.ark", 150)
    for ng in (True, False):
        with pytest.raises(NnetError, match=r"nan.ark: minibatch \d+: objective function is nan \(non-finite\)"):
            train_one_job(model(ng), egs.EgsArchive(tmp_path / "nan.ark"),
                          TrainOptions(learning_rate=0.01, minibatch_size="64", shuffle_buffer_size=0))


def test_non_finite_parameters_fail_the_job(egs_dir):
    # Batch-norm statistics do not enter the training objective: only the final check sees them.
    net = model()
    net.state_dict()["layers.0.post.1.running_mean"].fill_(float("inf"))
    with pytest.raises(NnetError, match="parameters became non-finite .* in layers.0.post.1.running_mean"):
        train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"), TrainOptions(learning_rate=0.01, minibatch_size="64"))


FAULTS_OF_REUSE = """
import ctypes, resource, sys
from nnet_tools import heap
if sys.argv[1] == "keep":
    assert heap.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def faults_of_a_block(size=16 << 20):   # a minibatch's activations: allocated, written, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_a_block()
print(faults_of_a_block())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_training_process_keeps_freed_memory_instead_of_faulting_it_in_again():
    # nnet-train-one-job sets this: with glibc's defaults the second 16 MB block is mapped afresh
    # (4096 page faults, as every step's activations and gradients were); kept, it costs none.
    faults = {mode: int(subprocess.run([sys.executable, "-c", FAULTS_OF_REUSE, mode], check=True,
                                       capture_output=True, text=True).stdout)
              for mode in ("default", "keep")}
    assert faults["default"] >= 4000 and faults["keep"] < 100, faults
