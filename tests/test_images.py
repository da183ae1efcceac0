"""Image data sets as data dirs, and IDX files (the Fashion-MNIST recipe's data preparation)."""
import gzip

import numpy as np
import pytest

from helpers import REPO, run
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.data.images import read_idx


def write_idx(path, array):
    """LeCun's IDX format: 0, 0, type 0x08 (ubyte), ndim, big-endian dims, data."""
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_data_prep_reads_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    idx = tmp_path / "idx"
    idx.mkdir()
    images = {"train": rng.integers(0, 256, (5, 4, 3)), "t10k": rng.integers(0, 256, (3, 4, 3))}
    labels = {"train": np.array([3, 1, 4, 1, 5]), "t10k": np.array([9, 2, 6])}
    for stem in ("train", "t10k"):  # gzipped (as Debian ships them) and plain, MNIST's ".idx" spelling too
        write_idx(idx / f"{stem}-images-idx3-ubyte.gz", images[stem])
        write_idx(idx / f"{stem}-labels.idx1-ubyte", labels[stem])
    script = REPO / "recipes" / "fashion_mnist" / "local" / "prepare_data.py"
    run("python3", script, "--idx-dir", idx, tmp_path / "data", check=True)
    feats = dict(tables.read_matrices(f"scp:{tmp_path}/data/test/feats.scp"))
    targets = dict(tables.read_int_vectors(f"scp:{tmp_path}/data/test/targets.scp"))
    assert sorted(feats) == ["t10k00000", "t10k00001", "t10k00002"]
    assert np.allclose(feats["t10k00001"], images["t10k"][1].reshape(1, 12) / 255.0)
    assert [int(targets[k][0]) for k in sorted(targets)] == [9, 2, 6]
    assert len((tmp_path / "data" / "train" / "utt2spk").read_text().splitlines()) == 5
    r = run("python3", script, "--idx-dir", tmp_path / "nowhere", tmp_path / "data2")
    assert r.returncode == 1 and "apt-get install dataset-fashion-mnist" in r.stderr


def test_bad_idx_file(tmp_path):
    (tmp_path / "x-ubyte").write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(NnetError, match="not an IDX file"):
        read_idx(tmp_path / "x-ubyte")
    write_idx(tmp_path / "short-ubyte", np.zeros((3, 2)))
    (tmp_path / "short-ubyte").write_bytes((tmp_path / "short-ubyte").read_bytes()[:-1])
    with pytest.raises(NnetError, match="5 values, header says"):
        read_idx(tmp_path / "short-ubyte")
