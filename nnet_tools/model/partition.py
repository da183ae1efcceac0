"""Partition pre-training (Miranda & Von Zuben, arXiv 1511.02954): split a network into k narrow
sub-models, train them independently, merge them into the full network's initial model.

Split: every hidden layer is cut into k blocks of units; sub-model j owns block j of every
hidden layer and keeps all inputs (spliced context included) and all outputs, so it has
``D0*D1/k + sum_l D(l-1)*D(l)/k^2 + D(L-1)*DL/k`` weights.

Merge, one rule for every tensor: a tensor axis over hidden units is partitioned (sub-model j
fills its block), an axis over inputs or outputs is shared (the sub-models' blocks are added,
times ``output_scale``). So the first layer's rows are stacked, hidden-to-hidden weights are
block-diagonal with zero cross blocks, hidden biases and batch-norm statistics are concatenated,
and the output layer is ``scale * [W1 ... Wk]`` with bias ``scale * sum_j b_j``. Every layer part
(ReLU/tanh/sigmoid, batch-norm without learned scale, dropout) acts per unit, so the hidden blocks
stay independent and, with the default scale 1/k, the merged pre-softmax output is exactly the mean
of the sub-models' logits. Noise then breaks the symmetry: Uniform(+-f * max|P|) on each weight
matrix and bias vector P separately, the zero cross blocks included.

Model files carry no optimiser state (momentum and natural-gradient statistics live in one
training job), so fine-tuning the merged model starts from a clean optimiser by construction.
The split's metadata (k, the full config, each hidden layer's blocks) is a partition.yaml sidecar
beside the initial sub-models; the merge checks the trained sub-models against it.
"""
import copy
import math
import os
from dataclasses import dataclass

import torch
import yaml

from nnet_tools.model import config as config_mod
from nnet_tools.model import model_io
from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import starts_as_zip, temp_dir, write_text, writing
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet
from nnet_tools.model.nonlinearity import is_stat

FORMAT = "nnet-tools-partition"


@dataclass
class Partition:
    config: dict   # the full model's normalised config
    blocks: list   # per hidden layer, the units owned by each sub-model

    @property
    def k(self):
        return len(self.blocks[0])

    def sub_config(self, j):
        """Sub-model j's config (0-based): the full config with each hidden dim cut to its block."""
        cfg = copy.deepcopy(self.config)
        for layer, sizes in zip(cfg["layers"], self.blocks):
            layer["dim"] = sizes[j]
        return cfg

    def to_yaml(self):
        hidden = [layer["name"] for layer in self.config["layers"][:-1]]
        return yaml.safe_dump({"format": FORMAT, "num-submodels": self.k,
                               "blocks": {name: list(sizes) for name, sizes in zip(hidden, self.blocks)},
                               "config": config_mod.yaml_load(config_mod.to_yaml(self.config))},
                              sort_keys=False)


def block_sizes(dim, k, allow_uneven=False, where=""):
    """dim units cut into k blocks; uneven cuts (only if allowed) put the extra units first."""
    if dim % k and not allow_uneven:
        raise NnetError(f"{where}: dim {dim} is not divisible by {k} sub-models (use --allow-uneven "
                        f"for blocks of unequal size)")
    if dim < k:
        raise NnetError(f"{where}: dim {dim} is smaller than the number of sub-models {k}")
    return [dim // k + (1 if j < dim % k else 0) for j in range(k)]


def split(cfg, k, allow_uneven=False, where="<config>"):
    """The Partition of a normalised full config into k sub-models."""
    if k < 2:
        raise NnetError(f"{where}: need at least 2 sub-models, got {k}")
    hidden = cfg["layers"][:-1]
    if not hidden:
        raise NnetError(f"{where}: the model has no hidden layer to split")
    _refuse_tdnn(cfg, where)
    return Partition(cfg, [block_sizes(layer["dim"], k, allow_uneven, f"{where}: layer '{layer['name']}'")
                           for layer in hidden])


def _refuse_tdnn(cfg, where):
    # Merging stacks hidden blocks block-diagonally, which assumes a layer reads its input once.
    for layer in cfg["layers"]:
        if "splice" in layer:
            raise NnetError(f"{where}: layer '{layer['name']}' has its own splice {layer['splice']} (a TDNN layer); "
                            f"partition pre-training supports only the top-level input splice")


def read_full(path):
    """(full config, presoftmax scale or None) from a YAML model config or from a model file
    (its stored config and its output layer's fixed scale)."""
    try:
        zipped = starts_as_zip(path)  # torch.save's format; a YAML file never is one
    except OSError:
        zipped = False   # config_mod.load names the problem
    if zipped:
        model = model_io.load(path)   # which names a cut one as such
        return model.config, model.layers[-1].presoftmax_scale
    return config_mod.load(path), None


def split_to_dir(cfg, k, out_dir, srand=0, allow_uneven=False, where="<config>", presoftmax_scale=None):
    """Write out_dir/partition.yaml, and sub.J.yaml + sub.J.mdl (J = 1..k, own seeded init; each
    with the full model's fixed presoftmax scale, if given: every sub-model has all outputs).
    The set is written in a scratch directory and moved in at the end: a failed split leaves
    an earlier set whole, never some of its files replaced."""
    part = split(cfg, k, allow_uneven, where)
    seeds = torch.randint(2 ** 31 - 1, (k,), generator=torch.Generator().manual_seed(srand)).tolist()
    names = []
    with temp_dir(out_dir, "split") as scratch:
        for j in range(k):
            sub_cfg = part.sub_config(j)
            write_text(f"{scratch}/sub.{j + 1}.yaml", config_mod.to_yaml(sub_cfg))
            torch.manual_seed(seeds[j])
            model = Nnet(sub_cfg)
            if presoftmax_scale is not None:
                model.set_presoftmax_scale(presoftmax_scale)
            model_io.save(model, f"{scratch}/sub.{j + 1}.mdl")
            names += [f"sub.{j + 1}.yaml", f"sub.{j + 1}.mdl"]
            logger.info(f"Sub-model {j + 1}: {num_parameters(model)} parameters; wrote {out_dir}/sub.{j + 1}.mdl")
        write_text(f"{scratch}/partition.yaml", part.to_yaml())
        for name in names + ["partition.yaml"]:  # the file merge starts from comes last
            with writing(f"{out_dir}/{name}"):
                os.replace(f"{scratch}/{name}", f"{out_dir}/{name}")
    logger.info(f"Split a model of {num_parameters(Nnet(cfg))} parameters into {k} sub-models; "
                f"hidden blocks {part.blocks}; wrote {out_dir}/partition.yaml")
    return part


def load(path):
    """Read and check a partition.yaml."""
    try:
        with open(path) as f:
            raw = config_mod.yaml_load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "partition file", e) from None
    except yaml.YAMLError as e:
        raise NnetError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise NnetError(f"{path}: not a partition file written by nnet-split-submodels (no 'format: {FORMAT}')")
    cfg = config_mod.normalize(raw.get("config"), f"{path}: config")
    k, blocks = raw.get("num-submodels"), raw.get("blocks")
    if not isinstance(k, int) or k < 2:
        raise NnetError(f"{path}: num-submodels must be an integer >= 2, got {k!r}")
    _refuse_tdnn(cfg, path)
    hidden = cfg["layers"][:-1]
    if not isinstance(blocks, dict) or list(blocks) != [layer["name"] for layer in hidden]:
        raise NnetError(f"{path}: blocks must name the hidden layers {[layer['name'] for layer in hidden]}, in order")
    for layer in hidden:
        sizes = blocks[layer["name"]]
        if (not isinstance(sizes, list) or len(sizes) != k or not all(isinstance(s, int) and s > 0 for s in sizes)
                or sum(sizes) != layer["dim"]):
            raise NnetError(f"{path}: blocks: {layer['name']}: need {k} positive sizes summing to {layer['dim']}, "
                            f"got {sizes!r}")
    return Partition(cfg, [blocks[layer["name"]] for layer in hidden])


def _first_difference(a, b):
    """'where: a-value vs b-value' for the first config field that differs, or None."""
    for key in ("input-dim", "splice"):
        if a[key] != b[key]:
            return f"{key}: {a[key]} vs {b[key]}"
    if len(a["layers"]) != len(b["layers"]):
        return f"number of layers: {len(a['layers'])} vs {len(b['layers'])}"
    for la, lb in zip(a["layers"], b["layers"]):
        for key in sorted(set(la) | set(lb)):
            if la.get(key) != lb.get(key):
                return f"layer '{la['name']}' {key}: {la.get(key)} vs {lb.get(key)}"
    return None


def partition_of(models, paths, part=None, part_path=None):
    """The Partition the trained sub-models belong to; refuses sub-models that do not fit together.

    With a partition file, sub-model j's config must be exactly that file's sub-model j; without
    one, all configs must be equal (an even split), and the full widths are K times theirs."""
    if len(models) < 2:
        raise NnetError(f"{paths[0]}: need at least 2 sub-models to merge, got {len(models)}")
    if part is not None:
        if len(models) != part.k:
            raise NnetError(f"{part_path}: num-submodels is {part.k} but {len(models)} sub-models were given")
        for j, (model, path) in enumerate(zip(models, paths)):
            diff = _first_difference(model.config, part.sub_config(j))
            if diff:
                raise NnetError(f"{path}: not sub-model {j + 1} of {part_path} ({diff} expected)")
        return part
    ref = models[0].config
    for model, path in zip(models[1:], paths[1:]):
        diff = _first_difference(model.config, ref)
        if diff:
            raise NnetError(f"{path}: sub-model does not match {paths[0]} ({diff}); "
                            f"sub-models of an uneven split need --partition")
    if len(ref["layers"]) < 2:
        raise NnetError(f"{paths[0]}: a sub-model needs a hidden layer; this one has only the output layer")
    full = copy.deepcopy(ref)
    blocks = [[m.config["layers"][i]["dim"] for m in models] for i in range(len(ref["layers"]) - 1)]
    for layer, sizes in zip(full["layers"], blocks):
        layer["dim"] = sum(sizes)
    return Partition(full, blocks)


def _slices(sizes):
    out, start = [], 0
    for size in sizes:
        out.append(slice(start, start + size))
        start += size
    return out


@torch.no_grad()
def merge(models, part, output_scale=None, noise_fraction=0.02, generator=None):
    """The full model from k trained sub-models (see the module doc); returns (model, noise table).

    The noise table lists (tensor name, max|P|, noise amplitude) for each noised tensor."""
    if not 0 <= noise_fraction < math.inf:
        raise NnetError(f"--noise-fraction must be finite and >= 0, got {noise_fraction}")
    k = part.k
    scale = 1.0 / k if output_scale is None else float(output_scale)
    if not math.isfinite(scale):
        raise NnetError(f"--output-scale must be finite, got {scale}")
    full = Nnet(part.config)
    hidden = [_slices(sizes) for sizes in part.blocks]
    last = len(full.layers) - 1
    for i, layer in enumerate(full.layers):
        rows = hidden[i] if i < last else None      # this layer's units, partitioned if hidden
        cols = hidden[i - 1] if i > 0 else None     # its inputs, partitioned past the first layer
        subs = [m.layers[i].state_dict() for m in models]
        for name, tensor in layer.state_dict().items():
            if not tensor.is_floating_point():  # batch counters: not per unit
                tensor.copy_(subs[0][name])
                continue
            if is_stat(name):  # the merged model has not run as a whole yet: no statistics
                continue
            tensor.zero_()
            for j, sub in enumerate(subs):
                index = (rows[j] if rows else slice(None),) + ((cols[j] if cols else slice(None),) if tensor.dim() == 2 else ())
                tensor[index] += sub[name] if rows else scale * sub[name]
    # The output is the mean of the sub-models' logits: their shared fixed scale carries over.
    scales = [m.layers[-1].presoftmax_scale for m in models]
    if len({None if s is None else tuple(s.tolist()) for s in scales}) > 1:
        raise NnetError("the sub-models' presoftmax scales differ: they were not split from one model")
    if scales[0] is not None:
        full.set_presoftmax_scale(scales[0])
    return full, add_noise(full, noise_fraction, generator)


@torch.no_grad()
def add_noise(model, fraction, generator=None):
    """P += Uniform(-a, a) with a = fraction * max|P|, for each affine weight and bias separately."""
    table = []
    if fraction == 0:
        return table
    for name, affine in model.updatable():
        for pname, p in (("weight", affine.weight), ("bias", affine.bias)):
            top = p.abs().max().item()
            amplitude = fraction * top
            p += (torch.rand(p.shape, generator=generator, dtype=p.dtype) * 2 - 1) * amplitude
            table.append((f"{name}.{pname}", top, amplitude))
    return table


def merge_files(paths, out, partition_file=None, output_scale=None, noise_fraction=0.02, srand=0):
    """nnet-merge-submodels: load, check, merge, add noise, write; logs what it did."""
    first = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in first:
            raise NnetError(f"{path}: the same file as {first[real]}: give each sub-model once")
        first[real] = path
    models = [model_io.load(p) for p in paths]
    for model, path in zip(models, paths):
        if bad := model.nonfinite():
            raise NnetError(f"{path}: non-finite values (NaN or inf) in {', '.join(bad)}; refusing to merge it")
    part = partition_of(models, paths, load(partition_file) if partition_file else None, partition_file)
    scale = 1.0 / part.k if output_scale is None else output_scale
    merged, noise = merge(models, part, scale, noise_fraction, torch.Generator().manual_seed(srand))
    for name, top, amplitude in noise:
        logger.info(f"{name}: max|P| = {top:.4g}, added uniform noise of +-{amplitude:.4g}")
    model_io.save(merged, out)
    logger.info(f"Merged {part.k} sub-models (hidden blocks {part.blocks}, output scale {scale:g}, "
                f"noise fraction {noise_fraction:g}) into a model of {num_parameters(merged)} parameters; wrote {out}")
    return merged


def num_parameters(model):
    return sum(p.numel() for p in model.parameters())
