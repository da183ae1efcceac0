"""Image data sets as Kaldi data dirs: each image is a one-frame utterance (one feature row of
its pixels) with a one-element target (its class); and LeCun's IDX files (MNIST's format)."""
import gzip
import os

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text
from nnet_tools.data.tables import IntVectorWriter, MatrixWriter

IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def write_data_dir(out, keys, pixels, labels):
    """out/{feats.ark,feats.scp,targets.ark,targets.scp,utt2spk}; keys must sort as given."""
    os.makedirs(out, exist_ok=True)
    with MatrixWriter(f"ark,scp:{out}/feats.ark,{out}/feats.scp") as feats, \
            IntVectorWriter(f"ark,scp:{out}/targets.ark,{out}/targets.scp") as targets:
        for key, row, label in zip(keys, pixels, labels):
            feats.write(key, np.asarray(row, dtype=np.float32).reshape(1, -1))
            targets.write(key, np.array([label], dtype=np.int32))
    write_text(f"{out}/utt2spk", "".join(f"{k} {k}\n" for k in keys))  # last, whole: the dir is complete


def find_idx(idx_dir, stem, kind):
    """The path of e.g. train-images-idx3-ubyte in idx_dir, gzipped or not, '-idx' or '.idx'."""
    for sep in ("-", "."):
        for ext in ("", ".gz"):
            path = os.path.join(idx_dir, f"{stem}{sep}{kind}-ubyte{ext}")
            if os.path.exists(path):
                return path
    raise NnetError(f"{idx_dir}: no {stem}-{kind}-ubyte[.gz]; on Debian/Ubuntu 'apt-get install "
                    f"dataset-fashion-mnist' puts Fashion-MNIST in /usr/share/datasets/fashion-mnist, or "
                    f"give a directory with the four MNIST-format IDX files")


def read_idx(path):
    """An IDX file: zero, zero, type byte, ndim byte, big-endian dims, data."""
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] not in IDX_TYPES:
        raise NnetError(f"{path}: not an IDX file (bad magic {raw[:4]!r})")
    ndim = raw[3]
    dims = np.frombuffer(raw, ">u4", ndim, 4).astype(int)
    data = np.frombuffer(raw, IDX_TYPES[raw[2]], offset=4 + 4 * ndim)
    if data.size != np.prod(dims):
        raise NnetError(f"{path}: {data.size} values, header says {list(dims)}")
    return data.reshape(dims)


def load_idx_set(idx_dir, stem):
    """(images as [N, pixels] floats in [0, 1], labels) of e.g. stem 'train' or 't10k'."""
    images = read_idx(find_idx(idx_dir, stem + "-images", "idx3"))
    labels = read_idx(find_idx(idx_dir, stem + "-labels", "idx1"))
    if len(images) != len(labels):
        raise NnetError(f"{idx_dir}: {len(images)} {stem} images but {len(labels)} labels")
    return images.reshape(len(images), -1).astype(np.float32) / 255.0, labels
