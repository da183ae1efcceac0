"""Objective and accuracy of a model on egs (Kaldi's nnet3-compute-prob)."""
from dataclasses import dataclass

import torch
from torch import nn

from nnet_tools.log import kaldi_origin, logger

EVAL_BATCH = 4096


@dataclass
class Stats:
    objf: float      # summed log-likelihood
    correct: float   # frames whose argmax matches the label
    frames: int

    def add(self, log_probs, labels):
        """Accumulate one batch of network outputs against its labels."""
        self.objf += log_probs.gather(1, labels.unsqueeze(1)).sum().item()
        self.correct += (log_probs.argmax(1) == labels).sum().item()
        self.frames += len(labels)

    def log(self):
        """Kaldi's NnetComputeProb::PrintTotalStats lines, with its header: log_parse.py's
        parse_prob_logs matches the program, function and source file too."""
        logger.info(f"Overall log-likelihood for 'output' is {self.objf / self.frames:.6g} per frame, "
                    f"over {self.frames} frames.",
                    extra=kaldi_origin("nnet3-compute-prob", "PrintTotalStats", "nnet-diagnostics.cc", 162))
        logger.info(f"Overall accuracy for 'output' is {self.correct / self.frames:.6g} per frame, "
                    f"over {self.frames} frames.",
                    extra=kaldi_origin("nnet3-compute-prob", "PrintTotalStats", "nnet-diagnostics.cc", 180))


@torch.no_grad()
def compute_prob(model, windows, labels, device="cpu"):
    """Batch-norm and dropout in test mode, as nnet3-compute-prob's defaults."""
    model.to(device).eval()
    stats = Stats(0.0, 0.0, 0)
    for start in range(0, len(labels), EVAL_BATCH):
        stats.add(model(windows[start:start + EVAL_BATCH].to(device)), labels[start:start + EVAL_BATCH].to(device))
    return stats


@torch.no_grad()
def recompute_batchnorm_stats(model, windows, device="cpu"):
    """Replace stored batch-norm statistics by the mean and variance of each layer's input over
    all of ``windows``, as nnet3-combine recomputes them: a pass in which each batch-norm layer
    normalises by its minibatch's statistics (and nothing else is in training mode) while the
    sums of every layer's inputs and their squares are accumulated in float64."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    sums = {m: [0, 0.0, 0.0] for m in bns}  # frames, sum x, sum x^2

    def accumulate(m, inputs):
        x = inputs[0].double()
        x = x.transpose(1, 2).reshape(-1, m.num_features) if x.dim() == 3 else x
        total = sums[m]
        total[0] += x.shape[0]
        total[1] += x.sum(0)
        total[2] += (x * x).sum(0)

    model.to(device).eval()
    hooks = [m.register_forward_pre_hook(accumulate) for m in bns]
    try:
        for m in bns:
            m.train()
        for start in range(0, len(windows), EVAL_BATCH):
            model(windows[start:start + EVAL_BATCH].to(device))
    finally:
        for hook in hooks:
            hook.remove()
        model.eval()
    for m, (frames, sx, sxx) in sums.items():
        mean = sx / frames
        m.running_mean.copy_(mean)
        m.running_var.copy_((sxx / frames - mean * mean).clamp_min(0.0))
