"""The run manifest (DIR/manifest.json): what an experiment dir was started with, so that running
the same driver command again resumes it, and a different one is refused rather than mixed in.

It holds what decides the models: the initial model (a hash of the config or input model), the
egs dir, its shape and which making of it (egs_made), the seed, and the options that shape the
schedule or the updates.
"""
import hashlib
import json
import os

from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text

NAME = "manifest.json"
MODEL = "model"   # the fingerprint of the run's models (model/structure.py), once 0.mdl is made
SCHEDULE_FIELDS = ("srand", "num_epochs", "jobs_initial", "jobs_final", "jobs_step", "initial_lrate", "final_lrate",
                   "minibatch_size", "momentum", "max_param_change", "outer_method", "proportional_shrink",
                   "dropout_schedule", "shuffle_buffer_size", "backstitch_scale", "backstitch_interval",
                   "add_options", "outer_momentum", "outer_learning_rate", "outer_nesterov", "chunk_training")


def file_hash(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise NnetError(f"{path}: cannot read ({e.strerror})") from None
    return h.hexdigest()[:16]


def egs_made(egs_dir):
    """What tells one making of an egs dir from another without reading its archives: info/, the
    CMVN it was made with (cmvn_opts, online_cmvn, global_cmvn.stats) and the archives' sizes. An
    egs dir made again with other features or CMVN gives another value; made again the same, the same."""
    h = hashlib.sha256()
    info = os.path.join(egs_dir, "info")
    names = [os.path.join("info", n) for n in sorted(os.listdir(info))] if os.path.isdir(info) else []
    for name in names + ["cmvn_opts", "online_cmvn", "global_cmvn.stats"]:
        path = os.path.join(egs_dir, name)
        h.update(f"{name}={file_hash(path) if os.path.isfile(path) else '-'};".encode())
    for name in sorted(n for n in os.listdir(egs_dir) if n.startswith("egs.") and n.endswith(".ark")):
        h.update(f"{name}:{os.path.getsize(os.path.join(egs_dir, name))};".encode())
    return h.hexdigest()[:16]


def describe(opts, egs_dir, num_archives, frames_per_eg, config=None, input_model=None):
    start = {"config": file_hash(config)} if config else {"input-model": file_hash(input_model)} if input_model else {}
    return {"start": start, "egs-dir": os.path.abspath(egs_dir), "egs-made": egs_made(egs_dir),
            "num-archives": num_archives, "frames-per-eg": frames_per_eg,
            **{k.replace("_", "-"): getattr(opts, k) for k in SCHEDULE_FIELDS}}


def read(exp_dir):
    path = os.path.join(exp_dir, NAME)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NnetError(f"{path}: cannot read the run manifest: {e.strerror}") from None
    except ValueError:
        raise NnetError(f"{path}: not a readable run manifest; remove it to start this dir over") from None


def write(exp_dir, manifest):
    write_text(os.path.join(exp_dir, NAME), json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def record_model(exp_dir, fingerprint):
    """Add the run's model fingerprint to the dir's manifest (the driver, once it made 0.mdl)."""
    write(exp_dir, {**(read(exp_dir) or {}), MODEL: fingerprint})


def differences(old, new):
    """'key: old -> new' for every setting that differs; a start of {} (resuming without the
    config or input model) matches any, and so does a setting an older manifest did not record.
    The model fingerprint is not a setting: the models are checked against it one by one."""
    out = []
    for key in sorted(set(old) | set(new)):
        if (key == "start" and not new.get("start")) or key not in old or key == MODEL:
            continue
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)} -> {new.get(key)}")
    return out
