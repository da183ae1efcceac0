"""Egs archives: the training examples one job reads, in a memory-mappable file.

An eg is ``frames_per_eg`` consecutive labelled frames of one utterance plus the input rows
around them: ``left_context + frames_per_eg + right_context`` feature rows (utterance edges padded
by repeating the edge frame, as Kaldi does). Labels of frames past the end of an utterance are
-1: a job training on frame position ``f`` skips egs whose label there is -1, as
``nnet3-copy-egs --frame`` drops egs lacking that frame.

File layout (not Kaldi's Nnet3Eg stream; see README): 8-byte magic, 8-byte little-endian header
length, a JSON header, then at 64-byte aligned offsets: inputs float32 [N, rows, D], labels int32
[N, frames_per_eg], keys as newline-separated UTF-8. Whole-archive reads are memory maps, so a job's
memory does not grow with the archive.
"""
import json
import os

import numpy as np
import torch

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path

MAGIC = b"NNETEGS1"
ALIGN = 64
HEADER_BYTES = 1024


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def read_info(egs_dir, name):
    """One integer from an egs dir's info/ folder (num_archives, frames_per_eg, ...)."""
    path = os.path.join(egs_dir, "info", name)
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        raise NnetError(f"{path}: missing or not an integer; is {egs_dir} an egs dir made by nnet-get-egs?") from None


def job_archive(egs_dir, job, archives_processed):
    """(archive path, label position) for job ``job`` (1-based) of an iteration, Kaldi's rotation."""
    from nnet_tools.train.schedule import archive_and_frame
    archive, frame = archive_and_frame(archives_processed, job, read_info(egs_dir, "num_archives"),
                                       read_info(egs_dir, "frames_per_eg"))
    return os.path.join(egs_dir, f"egs.{archive}.ark"), frame


def write_archive(path, inputs, labels, keys, left_context, right_context):
    """Write N egs atomically. inputs [N, left+fpe+right, D] float32; labels [N, fpe] int32."""
    inputs = np.ascontiguousarray(inputs, dtype=np.float32)
    labels = np.ascontiguousarray(labels, dtype=np.int32)
    n, rows, dim = inputs.shape if inputs.ndim == 3 else (0, 0, 0)
    fpe = labels.shape[1] if labels.ndim == 2 else 0
    if labels.shape[0] != n or rows != left_context + fpe + right_context or len(keys) != n:
        raise ValueError(f"inconsistent eg arrays: inputs {inputs.shape}, labels {labels.shape}, "
                         f"{len(keys)} keys, context {left_context},{right_context}")
    key_bytes = "\n".join(keys).encode()
    header = {"num_egs": n, "frames_per_eg": fpe, "left_context": left_context,
              "right_context": right_context, "feat_dim": dim}
    start = HEADER_BYTES
    header.update(inputs_offset=start, labels_offset=_aligned(start + inputs.nbytes))
    header["keys_offset"] = _aligned(header["labels_offset"] + labels.nbytes)
    header["keys_bytes"] = len(key_bytes)
    hbytes = json.dumps(header).encode().ljust(start - 16)  # JSON ignores the padding spaces
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(MAGIC + len(hbytes).to_bytes(8, "little") + hbytes)
        for offset, blob in ((header["inputs_offset"], inputs), (header["labels_offset"], labels),
                             (header["keys_offset"], key_bytes)):
            f.seek(offset)
            f.write(blob.tobytes() if isinstance(blob, np.ndarray) else blob)


class EgsArchive:
    """Read-only view of an archive: ``.inputs`` and ``.labels`` are memory maps."""

    def __init__(self, path):
        self.path = str(path)
        try:
            with open(self.path, "rb") as f:
                magic = f.read(8)
                hlen = int.from_bytes(f.read(8), "little")
                if magic != MAGIC or hlen > 1 << 20:
                    raise NnetError(f"{self.path}: not an nnet-tools egs archive (bad magic)")
                h = json.loads(f.read(hlen))
        except FileNotFoundError:
            raise NnetError(f"{self.path}: no such egs archive") from None
        except (OSError, ValueError) as e:
            raise NnetError(f"{self.path}: unreadable egs archive ({e})") from None
        self.num_egs, self.frames_per_eg = h["num_egs"], h["frames_per_eg"]
        self.left_context, self.right_context, self.feat_dim = h["left_context"], h["right_context"], h["feat_dim"]
        rows = self.left_context + self.frames_per_eg + self.right_context
        need = h["keys_offset"] + h["keys_bytes"]
        if os.path.getsize(self.path) < need:
            raise NnetError(f"{self.path}: truncated egs archive ({os.path.getsize(self.path)} < {need} bytes)")
        self._h = h
        if self.num_egs:
            self.inputs = np.memmap(self.path, np.float32, "r", h["inputs_offset"], (self.num_egs, rows, self.feat_dim))
            self.labels = np.memmap(self.path, np.int32, "r", h["labels_offset"], (self.num_egs, self.frames_per_eg))
        else:
            self.inputs = np.zeros((0, rows, self.feat_dim), np.float32)
            self.labels = np.zeros((0, self.frames_per_eg), np.int32)

    def keys(self):
        with open(self.path, "rb") as f:
            f.seek(self._h["keys_offset"])
            text = f.read(self._h["keys_bytes"]).decode()
        return text.split("\n") if text else []

    def check_model(self, model):
        """Egs must carry at least the model's context and its feature dim."""
        if model.left_context > self.left_context or model.right_context > self.right_context:
            raise NnetError(f"{self.path}: egs context ({self.left_context},{self.right_context}) is smaller "
                            f"than the model's ({model.left_context},{model.right_context})")
        if self.feat_dim != model.input_dim:
            raise NnetError(f"{self.path}: feature dim {self.feat_dim} does not match the model's {model.input_dim}")
        top = int(self.labels.max()) if self.num_egs else -1
        if top >= model.output_dim:
            raise NnetError(f"{self.path}: target id {top} >= model output dim {model.output_dim}")

    def windows(self, index, frame, left, right):
        """Model input windows [B, left+1+right, D] for label position ``frame`` of egs ``index``."""
        first = self.left_context + frame - left
        return torch.from_numpy(np.ascontiguousarray(self.inputs[index, first:first + left + 1 + right]))

    def all_frames(self, model):
        """Every labelled frame of the archive: (windows [M, left+1+right, D], labels [M]).

        Used for diagnostics and combination, which see all label positions (Kaldi: no --frame)."""
        self.check_model(model)
        left, right = model.left_context, model.right_context
        wins, labs = [], []
        for frame in range(self.frames_per_eg):
            keep = np.nonzero(self.labels[:, frame] >= 0)[0]
            wins.append(self.windows(keep, frame, left, right))
            labs.append(torch.from_numpy(self.labels[keep, frame].astype(np.int64)))
        if not sum(len(lab) for lab in labs):
            raise NnetError(f"{self.path}: no labelled frames")
        return torch.cat(wins), torch.cat(labs)
