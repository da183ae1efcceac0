"""What ``nnet3-compute`` gives for a feed-forward KaldiNnet (nnet3.py), in numpy: batch-norm and
dropout in test mode (nnet3-compute sets both), input frames outside the utterance taken from its
first and last frames, and with ``subsampling`` S the outputs at times 0, S, 2S, ... (ceil(T / S) of
them). It checks what a Kaldi file computes without Kaldi, exactly as Kaldi's components define it.
"""
import numpy as np

from nnet_tools.errors import NnetError

_SQUARED_NORM_FLOOR = 2.0 ** -66  # NormalizePerRow's floor on the mean square


def _blocks(x, block_dim, fn):
    """``fn`` on the rows of ``x`` cut into blocks of ``block_dim`` columns (Kaldi's reshape)."""
    rows, cols = x.shape
    return fn(x.reshape(rows * cols // block_dim, block_dim)).reshape(rows, -1)


def _log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _normalize(c, x):
    def rows(b):
        scale = np.maximum((b * b).sum(1) / (b.shape[1] * c.target_rms ** 2), _SQUARED_NORM_FLOOR) ** -0.5
        out = b * scale[:, None]
        if c.add_log_stddev:
            out = np.concatenate([out, (np.log(c.target_rms) - np.log(scale))[:, None]], axis=1)
        return out
    return _blocks(x, c.block_dim, rows)


def _batchnorm(c, x, name):
    if c.count <= 0:
        raise NnetError(f"component '{name}' (BatchNormComponent) has no statistics (<Count> 0): "
                        f"Kaldi would make up random ones")
    scale = c.target_rms / np.sqrt(np.maximum(np.asarray(c.var, np.float64), 0.0) + c.epsilon)
    return _blocks(x, c.block_dim, lambda b: (b - np.asarray(c.mean, np.float64)) * scale)


def propagate(c, x, name="?"):
    """One component's test-mode forward pass on a [rows, input_dim] float64 matrix."""
    kind = c.kind
    if kind.endswith("AffineComponent"):
        return x @ np.asarray(c.linear, np.float64).T + np.asarray(c.bias, np.float64)
    if kind == "RectifiedLinearComponent":
        return np.maximum(x, 0.0)
    if kind == "SigmoidComponent":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "TanhComponent":
        return np.tanh(x)
    if kind == "LogSoftmaxComponent":
        return _log_softmax(x)
    if kind == "SoftmaxComponent":
        return np.exp(_log_softmax(x))
    if kind == "BatchNormComponent":
        return _batchnorm(c, x, name)
    if kind == "DropoutComponent":
        return x * (1.0 - c.proportion)  # its test mode scales; GeneralDropoutComponent's does not
    if kind == "GeneralDropoutComponent":
        return x
    if kind == "NormalizeComponent":
        return _normalize(c, x)
    if kind == "FixedScaleComponent":
        return x * np.asarray(c.scales, np.float64)
    if kind == "FixedBiasComponent":
        return x + np.asarray(c.bias, np.float64)
    raise NnetError(f"component '{name}': no computation for type {kind}")


def _refs(desc, shift, out):
    """Every (node, time shift) a descriptor reads."""
    if desc[0] == "node":
        out.append((desc[1], shift))
    elif desc[0] == "offset":
        _refs(desc[1], shift + desc[2], out)
    else:
        for d in desc[1]:
            _refs(d, shift, out)
    return out


def compute(net, feats, subsampling=1):
    """[T, input_dim] features -> the output-node's [ceil(T / S), output_dim] values (float64)."""
    feats = np.asarray(feats, dtype=np.float64)
    frames = feats.shape[0]
    if feats.ndim != 2 or feats.shape[1] != net.inputs["input"] or frames == 0:
        raise NnetError(f"need features [T >= 1, {net.inputs['input']}], got {list(feats.shape)}")
    out_desc = net.outputs["output"][0]
    want = {"output": (0, ((frames - 1) // subsampling) * subsampling)}
    for name, _, desc in reversed(net.nodes + [("output", None, out_desc)]):  # consumers come last in a file
        if name not in want:
            continue
        lo, hi = want[name]
        for ref, shift in _refs(desc, 0, []):
            old = want.get(ref, (lo + shift, hi + shift))
            want[ref] = (min(old[0], lo + shift), max(old[1], hi + shift))
    values = {}
    if "input" in want:
        lo, hi = want["input"]
        values["input"] = (lo, feats[np.clip(np.arange(lo, hi + 1), 0, frames - 1)])

    def evaluate(desc, lo, hi):
        if desc[0] == "node":
            start, value = values[desc[1]]
            return value[lo - start:hi - start + 1]
        if desc[0] == "offset":
            return evaluate(desc[1], lo + desc[2], hi + desc[2])
        return np.concatenate([evaluate(d, lo, hi) for d in desc[1]], axis=1)

    for name, component, desc in net.nodes:
        if name in want:
            lo, hi = want[name]
            values[name] = (lo, propagate(net.components[component], evaluate(desc, lo, hi), name))
    lo, hi = want["output"]
    return evaluate(out_desc, lo, hi)[::subsampling]
