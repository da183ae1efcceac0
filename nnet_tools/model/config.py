"""Model configs: a small YAML language in the spirit of Kaldi's xconfig.

    input-dim: 40
    splice: -5:5              # or a list of offsets, e.g. [-2, 0, 2]
    natural-gradient: true    # default for every affine layer; per layer too: true | false | simple
    layers:
      - {name: tdnn1, type: relu-batchnorm, dim: 512}
      - {name: tdnn2, type: relu-batchnorm-dropout, dim: 512, dropout-proportion: 0.1, splice: [-1, 0, 1]}
      - {name: output, type: output, dim: 10}

A hidden layer type is an affine transform followed by the parts named in its type, in order:
``affine`` alone, or ``relu|tanh|sigmoid`` optionally followed by ``-batchnorm`` and/or ``-dropout``
(a trailing ``-layer`` is accepted, as in xconfig). ``output`` is affine + log-softmax. Defaults follow
Kaldi's xconfig: max-change 0.75 (1.5 for the output layer), learning-rate-factor 1, param-stddev
1/sqrt(input dim) and bias-stddev 1 (0 and 0 for the output layer), dropout-proportion 0.5,
l2-regularize 0 (xconfig's ``l2-regularize=``: the trainer adds -2 c lr N params to each step).

The top-level ``splice`` is the first layer's input (the spliced features). Any later layer may
take ``splice`` too: its input is the previous layer's output at those time offsets, appended,
as xconfig's ``relu-batchnorm-layer input=Append(-1,0,1)`` (a TDNN layer); default ``[0]``.
The model's context is then that of the whole chain (see ``context``).
"""
import copy
import math
import re

import yaml

from nnet_tools.errors import NnetError, read_error

NONLINEARITIES = ("relu", "tanh", "sigmoid")
NG_KEYS = ("rank-in", "rank-out", "update-period", "num-samples-history", "alpha")
LAYER_KEYS = {"name", "type", "dim", "max-change", "learning-rate-factor", "param-stddev",
              "bias-stddev", "dropout-proportion", "natural-gradient", "l2-regularize", "splice", *NG_KEYS}
TOP_KEYS = {"input-dim", "splice", "natural-gradient", "layers"}


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``-5:5`` as a base-60 integer (-305); splice ranges need it as a string."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))


def yaml_load(text_or_stream):
    return yaml.load(text_or_stream, Loader=_Loader)


def parse_splice(value, where):
    """'-5:5' -> [-5..5]; '-2,0,2' or a list -> that list; an int -> [int]."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            offsets = [value]
        elif isinstance(value, (list, tuple)):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise ValueError  # 0.7 would become 0, [0] a TypeError
            offsets = list(value)
        elif isinstance(value, str) and ":" in value:
            lo, hi = (int(v) for v in value.split(":"))
            offsets = list(range(lo, hi + 1))
        else:
            offsets = [int(v) for v in str(value).split(",")]
    except ValueError:
        raise NnetError(f"{where}: splice {value!r} is not 'a:b' or a list of integer offsets") from None
    if not offsets or sorted(set(offsets)) != offsets:
        raise NnetError(f"{where}: splice offsets {offsets} must be non-empty, increasing and distinct")
    return offsets


def _layer_parts(kind, where):
    kind = kind[:-len("-layer")] if kind.endswith("-layer") else kind
    if kind == "output":
        return ["affine", "log-softmax"]
    parts = kind.split("-")
    ok = (parts == ["affine"]) or (parts[0] in NONLINEARITIES and
                                    all(p in ("batchnorm", "dropout") for p in parts[1:]) and
                                    len(set(parts[1:])) == len(parts[1:]))
    if not ok:
        raise NnetError(f"{where}: unknown layer type {kind!r} (use affine, output, or "
                        f"relu|tanh|sigmoid[-batchnorm][-dropout])")
    return ["affine"] + [p for p in parts if p != "affine"]


def _number(value, key, where, lo, hi=None):
    """value as a float within [lo, hi], or one clear error naming the layer and key."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (lo <= value and (hi is None or value <= hi)):
        bound = f"in [{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"
        raise NnetError(f"{where}: {key} must be a number {bound}, got {value!r}")
    return float(value)


_MAX_DIM = 2 ** 31 - 1  # Kaldi's dims are int32


def _dim(value, key, where):
    """A positive integer (true is not 1 here, nor 8.0 a dim)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= _MAX_DIM:
        raise NnetError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _optional_number(value, key, where):
    """None (the default, e.g. 1/sqrt(fan-in)) or a finite number >= 0."""
    return None if value is None else _number(value, key, where, 0.0)


def _ng_option(key, value, where):
    """A natural-gradient option (NG_KEYS), checked as OnlineNaturalGradient would check it."""
    if key in ("rank-in", "rank-out", "update-period"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise NnetError(f"{where}: {key} must be a positive integer, got {value!r}")
        return value
    if key == "num-samples-history":
        if _number(value, key, where, 0.0, 1.0e6) == 0.0:
            raise NnetError(f"{where}: {key} must be a number in (0, 1e+06], got {value!r}")
        return value
    _number(value, key, where, 0.0)  # alpha
    return value


def normalize(raw, where="<config>"):
    """Check a config dict and fill in every default, so a model file holds the whole truth."""
    if not isinstance(raw, dict):
        raise NnetError(f"{where}: a model config must be a mapping")
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise NnetError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(TOP_KEYS)}")
    for key in ("input-dim", "layers"):
        if key not in raw:
            raise NnetError(f"{where}: missing required key {key!r}")
    input_dim = _dim(raw["input-dim"], "input-dim", where)
    default_ng = raw.get("natural-gradient", True)
    layers_in = raw["layers"]
    if not isinstance(layers_in, list) or not layers_in:
        raise NnetError(f"{where}: layers must be a non-empty list")
    layers, names = [], set()
    for i, layer in enumerate(layers_in):
        lw = f"{where}: layer {i + 1}"
        if not isinstance(layer, dict):
            raise NnetError(f"{lw}: must be a mapping like {{name: x, type: relu, dim: 256}}")
        unknown = set(layer) - LAYER_KEYS
        if unknown:
            raise NnetError(f"{lw}: unknown key(s) {sorted(unknown)}")
        name = str(layer.get("name", f"layer{i + 1}"))
        if not name or len(name.split()) != 1 or name != name.strip():  # logs print names as tokens
            raise NnetError(f"{lw}: name {name!r} must be one word, without spaces")
        if name in names:
            raise NnetError(f"{lw}: duplicate layer name {name!r}")
        names.add(name)
        is_output = i == len(layers_in) - 1
        parts = _layer_parts(str(layer.get("type", "output" if is_output else "relu")), lw)
        if is_output != ("log-softmax" in parts):
            raise NnetError(f"{lw}: exactly the last layer must be of type 'output'")
        dim = _dim(layer.get("dim"), "dim", f"{lw} ({name})")
        if i == 0 and "splice" in layer:
            raise NnetError(f"{lw} ({name}): the first layer's offsets are the top-level 'splice'")
        ng = layer.get("natural-gradient", default_ng)
        if not (ng is True or ng is False or ng == "simple"):  # 1 == True, but 1 is not a setting
            raise NnetError(f"{lw} ({name}): natural-gradient must be true, false or simple")
        out = {"name": name, "parts": parts, "dim": dim,
               "max-change": _number(layer.get("max-change", 1.5 if is_output else 0.75), "max-change", f"{lw} ({name})", 0.0),
               "learning-rate-factor": _number(layer.get("learning-rate-factor", 1.0), "learning-rate-factor", f"{lw} ({name})", 0.0),
               "param-stddev": _optional_number(layer.get("param-stddev", 0.0 if is_output else None),
                                                "param-stddev", f"{lw} ({name})"),
               "bias-stddev": _number(layer.get("bias-stddev", 0.0 if is_output else 1.0), "bias-stddev", f"{lw} ({name})", 0.0),
               "natural-gradient": ng}
        if i > 0 and "splice" in layer:
            offsets = parse_splice(layer["splice"], f"{lw} ({name})")
            if offsets != [0]:  # the default stays implicit, so configs without TDNN layers read as before
                out["splice"] = offsets
        if "dropout" in parts:
            out["dropout-proportion"] = _number(layer.get("dropout-proportion", 0.5), "dropout-proportion",
                                                f"{lw} ({name})", 0.0, 1.0)
        if "l2-regularize" in layer:  # only when given, so configs without it read as before
            out["l2-regularize"] = _number(layer["l2-regularize"], "l2-regularize", f"{lw} ({name})", 0.0)
        for key in NG_KEYS:
            if key in layer:
                out[key] = _ng_option(key, layer[key], f"{lw} ({name})")
        layers.append(out)
    return {"input-dim": input_dim,
            "splice": parse_splice(raw.get("splice", [0]), where),
            "layers": layers}


def _read_raw(path):
    try:
        with open(path) as f:
            return yaml_load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "model config", e) from None
    except yaml.YAMLError as e:
        raise NnetError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None


def load(path):
    """Read and normalise a YAML model config file."""
    return normalize(_read_raw(path), str(path))


def load_with_output_dim(path, dim):
    """(normalised config, its YAML text) of a config file with the output layer's dim set to
    ``dim``, as xconfig's 'output-layer dim=$num_pdfs': a recipe's config need not know the
    pdf count of the alignments it is trained on."""
    raw = _read_raw(path)
    normalize(raw, str(path))  # a fault in the file itself is named as the file's
    raw["layers"][-1]["dim"] = dim
    return normalize(raw, f"{path} with output dim {dim}"), yaml.safe_dump(raw, sort_keys=False)


def to_yaml(cfg):
    """A normalised config written back as YAML (for split sub-model configs and nnet-info)."""
    out = copy.deepcopy(cfg)
    for layer in out["layers"]:
        parts = layer.pop("parts")
        layer["type"] = "output" if "log-softmax" in parts else "-".join(p for p in parts if p != "affine") or "affine"
    return yaml.safe_dump(out, sort_keys=False)


def layer_offsets(cfg):
    """Per layer, the time offsets its input is taken at: the top-level splice for the first
    layer (offsets into the features), the layer's own ``splice`` (into the layer below) after."""
    return [cfg["splice"]] + [layer.get("splice", [0]) for layer in cfg["layers"][1:]]


def context(cfg):
    """(left, right) context of the model, Kaldi's model_left_context / model_right_context.

    An output frame t depends on the features from t + sum(min offsets) to t + sum(max offsets),
    summed over the layers (as nnet3 finds by following the Append()s down to the input); the
    context is how far that reaches left and right of t, never less than 0.
    """
    offsets = layer_offsets(cfg)
    return max(0, -sum(o[0] for o in offsets)), max(0, sum(o[-1] for o in offsets))
