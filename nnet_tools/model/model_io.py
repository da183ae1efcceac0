"""Model files: one torch file with the config, the state dict and small metadata.

Written atomically and loaded with ``weights_only=True``, so a model file can never run code.
Natural-gradient state is not saved: each job re-estimates it, as in Kaldi. '-' is stdin or
stdout, as in Kaldi (``nnet-average-models 1.mdl 2.mdl - | nnet-info -``).
"""
import io
import os
import re
import sys
import zipfile

import torch

from nnet_tools.model import config as config_mod
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, writing
from nnet_tools.model.nnet import Nnet
from nnet_tools.model.nonlinearity import is_stat

FORMAT = "nnet-tools-model"
VERSION = 1


def save(model, path, priors=None):
    blob = {"format": FORMAT, "version": VERSION, "config": model.config,
            "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "priors": None if priors is None else torch.as_tensor(priors, dtype=torch.float32)}
    if str(path) == "-":
        with writing("stdout"):
            sys.stdout.flush()
            _save_to(blob, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        _save_to(blob, f)


class _Writes:
    """A file as torch.save sees it, keeping the OSError of a failed write: torch reports a full
    disk only as "unexpected pos", the OSError names it (fileio)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data):
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self):
        self.f.flush()


def _save_to(blob, f):
    """torch.save straight into an open file: no serialised copy of the model in memory."""
    out = _Writes(f)
    try:
        torch.save(blob, out)
    except Exception:
        if out.error is not None:
            raise out.error from None
        raise


_stdin = None  # stdin's bytes, read once: a program may read its model twice (priors, then all)


def _stdin_bytes():
    global _stdin
    if _stdin is None:
        _stdin = sys.stdin.buffer.read()
    return _stdin


def read(path, mmap=False):
    """The raw dict of a model file, checked; errors name the file and what is wrong.

    With ``mmap`` the tensors are mapped from the file, not read: only the pages of the tensors
    touched are read, and they are released when the last of them is dropped."""
    try:
        stdin = str(path) == "-"
        # torch.save writes a zip archive; anything else would get one of torch's long messages.
        if stdin or (os.path.isfile(path) and os.access(path, os.R_OK)):
            size = len(_stdin_bytes()) if stdin else os.path.getsize(path)
            if not zipfile.is_zipfile(io.BytesIO(_stdin_bytes()) if stdin else path):
                what = "empty file" if size == 0 else "not a zip archive: truncated, or another format"
                raise NnetError(f"{'stdin' if stdin else path}: not a readable nnet-tools model file ({what})")
        source = io.BytesIO(_stdin_bytes()) if stdin else path
        blob = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap and not stdin)
    except NnetError:
        raise
    except FileNotFoundError:
        raise NnetError(f"{path}: no such model file") from None
    except IsADirectoryError:
        raise NnetError(f"{path}: is a directory, not a model file") from None
    except PermissionError:
        raise NnetError(f"{path}: permission denied reading model file") from None
    except EOFError:
        raise NnetError(f"{path}: not a readable nnet-tools model file (empty or truncated)") from None
    except Exception as e:   # torch.load fails in many ways on a file that is not ours (KeyError on text)
        raise NnetError(f"{path}: not a readable nnet-tools model file ({first_sentence(e)})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise NnetError(f"{path}: not an nnet-tools model file (no '{FORMAT}' header)")
    if blob.get("version") != VERSION:
        raise NnetError(f"{path}: model file version {blob.get('version')} is not supported (want {VERSION})")
    if not isinstance(blob.get("config"), dict) or not isinstance(blob.get("state"), dict):
        raise NnetError(f"{path}: corrupt model file (its config or its parameters are missing)")
    return blob


def priors(path):
    """A model file's stored priors (None if it has none), read without loading its parameters:
    the programs that make a model from others carry them on, as Kaldi's nnet3-am-copy
    --set-raw-nnet keeps the AmNnetSimple's."""
    return read(path, mmap=True).get("priors")


def first_sentence(error, limit=160):
    """The gist of a library's (often paragraph-long) message: its first sentence, never cut mid-word."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, KeyError):
        text = f"unexpected content, {type(error).__name__} {text}"
    text = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text


def load(path, with_priors=False):
    blob = read(path)
    model = build(blob, path)
    scale_key = f"layers.{len(model.layers) - 1}.presoftmax_scale"
    # Files written before the nonlinearity statistics existed lack them: they load as zero.
    state = {**{k: v for k, v in model.state_dict().items() if is_stat(k)}, **blob["state"]}
    try:
        if scale_key in state:  # optional: files written before it existed lack it
            model.set_presoftmax_scale(state[scale_key])
        model.load_state_dict(state)
    except (RuntimeError, NnetError) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
        detail = lines[1] if len(lines) > 1 and lines[0].startswith("Error(s) in loading") else lines[0]
        raise NnetError(f"{path}: parameters do not match its config: {first_sentence(detail, 240)}") from None
    return (model, blob.get("priors")) if with_priors else model


def build(blob, path):
    """The network a read model file's config describes, its parameters freshly initialised
    (not the file's): for a caller that fills them in itself."""
    return Nnet(config_mod.normalize(_to_yaml_types(blob["config"]), f"{path}: config"))


def _to_yaml_types(cfg):
    # A saved normalised config has "parts"; normalize() reads "type". Round-trip through to_yaml's view.
    return config_mod.yaml_load(config_mod.to_yaml(cfg))
