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

Compressed archives (header "compress": "two-byte") store each eg's inputs as Kaldi's
CompressedMatrix kTwoByte does for a matrix: a global header (min, range) per eg, float32 [N, 2],
and uint16 codes [N, rows, D], value = min + range * code / 65535. Half the bytes of float32, an
error of at most range / 65535 / 2 (plus float rounding); the codes stay memory-mapped and only
the minibatch being read is decoded.
"""
import json
import os
import re

import numpy as np

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
    except (PermissionError, IsADirectoryError) as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    except (OSError, ValueError, IndexError):
        raise NnetError(f"{path}: missing or not an integer; is {egs_dir} an egs dir made by nnet-get-egs?") from None


def archive_and_frame(archives_processed, job, num_archives, frames_per_eg):
    """1-based archive index and label position of job ``job`` (1-based), as nnet3's driver."""
    k = archives_processed + job - 1
    archive = k % num_archives + 1
    frame = (k // num_archives + archive) % frames_per_eg
    return archive, frame


def job_archive(egs_dir, job, archives_processed):
    """(archive path, label position) for job ``job`` (1-based) of an iteration, Kaldi's rotation."""
    archive, frame = archive_and_frame(archives_processed, job, read_info(egs_dir, "num_archives"),
                                       read_info(egs_dir, "frames_per_eg"))
    return os.path.join(egs_dir, f"egs.{archive}.ark"), frame


TWO_BYTE = "two-byte"
_STEP = np.float32(1 / 65535)


def compress_two_byte(inputs):
    """Kaldi's kTwoByte per eg: inputs [N, rows, D] float32 -> (codes uint16, (min, range) float32 [N, 2])."""
    flat = inputs.reshape(len(inputs), -1)
    lo, hi = flat.min(axis=1), flat.max(axis=1).astype(np.float64)
    hi = np.where(hi == lo, lo + (1 + np.abs(lo.astype(np.float64))), hi)   # a constant eg: any positive range
    span = hi - lo
    if not (span <= np.finfo(np.float32).max).all():   # it would be inf, and the decoded eg NaN
        raise ValueError(f"an eg's values span {span.max():g}, more than float32 holds: they cannot be compressed")
    span = span.astype(np.float32)
    span[span <= 0] = 1e-5
    f = np.clip((flat - lo[:, None]) / span[:, None], 0, 1)
    codes = (f * 65535 + 0.499).astype(np.uint16)      # + 0.499: round to nearest, as Kaldi
    return codes.reshape(inputs.shape), np.stack([lo, span], axis=1).astype(np.float32)


def decompress_two_byte(codes, header):
    """codes [B, rows, D] uint16 and their egs' (min, range) [B, 2] -> float32 [B, rows, D]."""
    out = codes.astype(np.float32)
    out *= (header[:, 1] * _STEP)[:, None, None]
    out += header[:, 0][:, None, None]
    return out


class ArchiveWriter:
    """Write an archive of a known number of egs in chunks, in order, so a writer needs only one
    chunk in memory; the file appears (atomically) at close(). Use as a context manager."""

    def __init__(self, path, num_egs, feat_dim, frames_per_eg, left_context, right_context, compress=False):
        self.path, self.n, self.done = str(path), num_egs, 0
        self.rows, self.dim, self.fpe = left_context + frames_per_eg + right_context, feat_dim, frames_per_eg
        self.compress = compress
        h = {"num_egs": num_egs, "frames_per_eg": frames_per_eg, "left_context": left_context,
             "right_context": right_context, "feat_dim": feat_dim, "inputs_offset": HEADER_BYTES}
        end = HEADER_BYTES + num_egs * self.rows * feat_dim * (2 if compress else 4)
        if compress:
            h.update(compress=TWO_BYTE, ranges_offset=_aligned(end))
            end = h["ranges_offset"] + num_egs * 8
        h["labels_offset"] = _aligned(end)
        h["keys_offset"] = _aligned(h["labels_offset"] + num_egs * frames_per_eg * 4)
        self.header, self.key_bytes = h, 0
        self._atomic = atomic_path(self.path)

    def __enter__(self):
        self._f = open(self._atomic.__enter__(), "wb")
        return self

    def write(self, inputs, labels, keys):
        inputs = np.ascontiguousarray(inputs, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.int32)
        b = len(inputs)
        if (b and inputs.shape[1:] != (self.rows, self.dim)) or labels.shape != (b, self.fpe) \
                or len(keys) != b or self.done + b > self.n:
            raise ValueError(f"inconsistent eg arrays: inputs {inputs.shape}, labels {labels.shape}, {len(keys)} "
                             f"keys; want [*, {self.rows}, {self.dim}], [*, {self.fpe}], {self.n - self.done} more")
        if not b:
            return
        h, f, i = self.header, self._f, self.done
        blobs = [(h["labels_offset"] + i * self.fpe * 4, labels)]
        if self.compress:
            try:
                codes, ranges = compress_two_byte(inputs)
            except ValueError as e:
                raise NnetError(f"{self.path}: {e} (egs from '{keys[0]}' on); dump without --compress") from None
            blobs += [(h["inputs_offset"] + i * self.rows * self.dim * 2, codes), (h["ranges_offset"] + i * 8, ranges)]
        else:
            blobs.append((h["inputs_offset"] + i * self.rows * self.dim * 4, inputs))
        text = ("\n" if i else "") + "\n".join(keys)
        blobs.append((h["keys_offset"] + self.key_bytes, text.encode()))
        for offset, blob in blobs:
            f.seek(offset)
            f.write(blob.data if isinstance(blob, np.ndarray) else blob)
        self.key_bytes += len(blobs[-1][1])
        self.done += b

    def __exit__(self, kind, value, tb):
        try:
            if kind is None:
                if self.done != self.n:
                    raise ValueError(f"{self.path}: {self.done} egs written, {self.n} announced")
                self.header["keys_bytes"] = self.key_bytes
                hbytes = json.dumps(self.header).encode().ljust(HEADER_BYTES - 16)  # JSON ignores the padding
                self._f.seek(0)
                self._f.write(MAGIC + len(hbytes).to_bytes(8, "little") + hbytes)
                self._f.truncate(self.header["keys_offset"] + self.key_bytes)
            self._f.close()
        except BaseException as e:
            self._f.close()
            self._atomic.__exit__(type(e), e, e.__traceback__)
            raise
        return self._atomic.__exit__(kind, value, tb)


def write_archive(path, inputs, labels, keys, left_context, right_context, compress=False):
    """Write N egs atomically. inputs [N, left+fpe+right, D] float32; labels [N, fpe] int32."""
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    n, _, dim = inputs.shape if inputs.ndim == 3 else (0, 0, 0)
    fpe = labels.shape[1] if labels.ndim == 2 else 0
    if inputs.ndim == 3 and inputs.shape[1] != left_context + fpe + right_context:
        raise ValueError(f"inconsistent eg arrays: inputs {inputs.shape}, labels {labels.shape}, "
                         f"context {left_context},{right_context}")
    with ArchiveWriter(path, n, dim, fpe, left_context, right_context, compress) as w:
        w.write(inputs, labels, keys)


# A target id this large is a corrupt alignment, not a model: its output layer would not fit in memory.
MAX_TARGETS = 1 << 24

_HEADER_COUNTS = ("num_egs", "frames_per_eg", "left_context", "right_context", "feat_dim",
                  "inputs_offset", "labels_offset", "keys_offset", "keys_bytes")


def _check_header(h, path):
    """The header's counts and offsets are non-negative integers (a frame and a dim at least 1)."""
    if not isinstance(h, dict):
        raise NnetError(f"{path}: corrupt egs archive: its header is not a mapping")
    need = _HEADER_COUNTS + (("ranges_offset",) if h.get("compress") else ())
    for key in need:
        value = h.get(key)
        least = 1 if key in ("frames_per_eg", "feat_dim") else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise NnetError(f"{path}: corrupt egs archive: header field {key} is {value!r}, "
                            f"expected an integer >= {least}")


class EgsArchive:
    """Read-only view of an archive: ``.inputs`` and ``.labels`` are memory maps (``.inputs`` holds
    the uint16 codes of a compressed archive, ``.ranges`` their per-eg (min, range)); ``rows`` and
    ``windows`` give float32 values either way."""

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
            if re.match(r"(ark|scp)[,a-z]*:", self.path):   # Kaldi's egs are tables; ours are plain files
                raise NnetError(f"{self.path}: an egs archive is a plain file name, not a table: drop the "
                                f"'{self.path.partition(':')[0]}:'") from None
            raise NnetError(f"{self.path}: no such egs archive") from None
        except OSError as e:
            raise NnetError(f"{self.path}: cannot read egs archive: {e.strerror}") from None
        except ValueError as e:
            raise NnetError(f"{self.path}: unreadable egs archive ({e})") from None
        _check_header(h, self.path)
        self.num_egs, self.frames_per_eg = h["num_egs"], h["frames_per_eg"]
        self.left_context, self.right_context, self.feat_dim = h["left_context"], h["right_context"], h["feat_dim"]
        rows = self.left_context + self.frames_per_eg + self.right_context
        need = h["keys_offset"] + h["keys_bytes"]
        if os.path.getsize(self.path) < need:
            raise NnetError(f"{self.path}: truncated egs archive ({os.path.getsize(self.path)} < {need} bytes)")
        self._h = h
        self.compress = h.get("compress")
        if self.compress not in (None, TWO_BYTE):
            raise NnetError(f"{self.path}: unknown egs compression '{self.compress}'")
        dtype = np.uint16 if self.compress else np.float32
        self.ranges = None
        if self.num_egs:
            # .inputs: float32 values, or for a compressed archive the uint16 codes (see windows()).
            try:
                self.inputs = np.memmap(self.path, dtype, "r", h["inputs_offset"], (self.num_egs, rows, self.feat_dim))
                self.labels = np.memmap(self.path, np.int32, "r", h["labels_offset"], (self.num_egs, self.frames_per_eg))
                if self.compress:
                    self.ranges = np.memmap(self.path, np.float32, "r", h["ranges_offset"], (self.num_egs, 2))
            except (ValueError, OverflowError) as e:  # offsets and sizes beyond the file
                raise NnetError(f"{self.path}: corrupt egs archive: {e}") from None
        else:
            self.inputs = np.zeros((0, rows, self.feat_dim), dtype)
            self.labels = np.zeros((0, self.frames_per_eg), np.int32)
            self.ranges = np.zeros((0, 2), np.float32)

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
        low = int(self.labels.min()) if self.num_egs else -1
        if low < -1:  # -1 marks a frame without a target; nothing writes less
            raise NnetError(f"{self.path}: target id {low} < 0 (corrupt archive?)")

    def windows(self, index, frame, left, right):
        """Model input windows [B, left+1+right, D] for label position ``frame`` of egs ``index``."""
        import torch   # here, not at the top: the egs-dumping programs never need torch, its start-up time or memory
        first = self.left_context + frame - left
        return torch.from_numpy(self.rows(index, first, left + 1 + right))

    def rows(self, index, first=0, count=None):
        """Input rows first..first+count-1 of egs ``index`` as float32 [B, count, D], decoding only these."""
        stop = None if count is None else first + count
        block = self.inputs[index, first:stop]
        if self.compress:
            return decompress_two_byte(block, np.asarray(self.ranges[index]).reshape(-1, 2))
        return np.ascontiguousarray(block)

    def all_frames(self, model):
        """Every labelled frame of the archive: (windows [M, left+1+right, D], labels [M]).

        Used for diagnostics and combination, which see all label positions (Kaldi: no --frame)."""
        import torch
        self.check_model(model)
        left, right = model.left_context, model.right_context
        wins, labs = [], []
        for frame in range(self.frames_per_eg):
            keep = np.nonzero(self.labels[:, frame] >= 0)[0]
            wins.append(self.windows(keep, frame, left, right))
            labs.append(torch.from_numpy(self.labels[keep, frame].astype(np.int64)))
        if not sum(len(lab) for lab in labs):
            raise NnetError(f"{self.path}: no labelled frames")
        wins = torch.cat(wins)
        if not bool(torch.isfinite(wins).all()):  # nnet-get-egs never writes these: a corrupt archive
            i = next(i for i in range(self.num_egs) if not np.isfinite(self.rows([i])).all())
            raise NnetError(f"{self.path}: eg {i} ('{self.keys()[i]}') has NaN or infinite features")
        return wins, torch.cat(labs)
