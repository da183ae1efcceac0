"""Chunk training (nnet-train-one-job --chunk true, as nnet3-train): every labelled frame of each
eg in one forward/backward over its chunk, against the --frame scheme's one position per pass."""
import numpy as np
import pytest
import torch

from helpers import run
from nnet_tools.data import egs
from nnet_tools.model import config
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import job

# No batch-norm: a layer's output then depends on its own frame's window only, in any batching.
TDNN = """input-dim: 5
splice: -1:1
layers:
  - {name: tdnn1, type: relu, dim: 12}
  - {name: tdnn2, type: relu, dim: 12, splice: [-1, 0, 1]}
  - {name: output, type: output, dim: 3, param-stddev: 0.3}
"""


def archive(path, n=160, fpe=4, left=2, right=2, seed=0):
    """egs of 4 labelled frames, some of them unlabelled (-1), classes set by the centre frames."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, (n, fpe)).astype(np.int32)
    labels[rng.random((n, fpe)) < 0.2] = -1
    inputs = rng.normal(size=(n, left + fpe + right, 5)).astype(np.float32)
    inputs[:, left:left + fpe, 0] += 2.0 * np.maximum(labels, 0)
    egs.write_archive(path, inputs, labels, [f"u{i}-0" for i in range(n)], left, right)
    return egs.EgsArchive(path), int((labels >= 0).sum())


def model(seed=0):
    torch.manual_seed(seed)
    return Nnet(config.normalize(config.yaml_load(TDNN)))


def test_a_chunk_is_the_sum_of_its_frames(tmp_path):
    """Learning rate 0: the chunk pass's objective and frame count are the --frame passes' summed
    over the label positions, unlabelled frames left out."""
    arch, labelled = archive(tmp_path / "egs.1.ark")
    options = dict(learning_rate=0.0, minibatch_size="16", shuffle_buffer_size=0)
    average, frames = job.train_one_job(model(), arch, job.TrainOptions(chunk=True, **options))
    assert frames == labelled
    # a label position's unlabelled egs are left out of its minibatches: 16 each, or fewer at the end
    options["minibatch_size"] = "1:16"
    by_frame = [job.train_one_job(model(), arch, job.TrainOptions(chunk=False, frame=k, **options)) for k in range(4)]
    assert sum(f for _, f in by_frame) == labelled
    assert average * frames == pytest.approx(sum(a * f for a, f in by_frame), rel=1e-5)


def test_chunk_training_learns_and_the_program_counts_frames(tmp_path):
    arch, labelled = archive(tmp_path / "egs.1.ark", n=384)
    net = model()
    before, _ = job.train_one_job(model(), arch, job.TrainOptions(learning_rate=0.0, chunk=True, minibatch_size="32"))
    for seed in range(5):
        job.train_one_job(net, arch, job.TrainOptions(learning_rate=0.01, chunk=True, minibatch_size="32", srand=seed))
    after, _ = job.train_one_job(net, arch, job.TrainOptions(learning_rate=0.0, chunk=True, minibatch_size="32"))
    assert after > before + 0.1, (before, after)
    from nnet_tools.model import model_io
    model_io.save(model(), tmp_path / "0.mdl")
    r = run("nnet-train-one-job", "--learning-rate", 0.01, "--chunk", "true", "--minibatch-size", 64,
            tmp_path / "0.mdl", tmp_path / "egs.1.ark", tmp_path / "1.mdl", check=True)
    assert "Processing 384 egs of 4 frames into 6 minibatches, discarding 0.00% of egs." in r.stderr
    assert f"Overall average objective function for 'output' is" in r.stderr and f"over {labelled} frames." in r.stderr
