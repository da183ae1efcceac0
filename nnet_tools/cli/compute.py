import contextlib

import click
import numpy as np

from nnet_tools.report import compute
from nnet_tools import device
from nnet_tools.model import model_io
from nnet_tools.data import tables
from nnet_tools.log import logger
from nnet_tools.cli.common import cmvn_options, program
from nnet_tools.data import cmvn as cmvn_mod


@click.command()
@click.option("--apply-exp", is_flag=True, help="Write posteriors instead of log-posteriors.")
@click.option("--priors", default=None, help="Text vector of class priors: output log-posterior - log-prior.")
@click.option("--use-gpu", default="no", help="yes|no|wait.")
@cmvn_options
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("output_wspecifier")
@program("nnet-compute")
def main(model, feats_rspecifier, output_wspecifier, apply_exp, priors, use_gpu, cmvn, utt2spk, cmvn_opts):
    """Run MODEL over every utterance of FEATS_RSPECIFIER; write log-posteriors as a matrix table.

    \b
    Example:
      nnet-compute exp/nnet/final.mdl scp:data/test/feats.scp ark,t:exp/nnet/logpost.txt
      nnet-compute --priors exp/nnet/priors.vec exp/nnet/final.mdl scp:data/test/feats.scp ark:- | latgen-faster ...
    """
    net = model_io.load(model)
    log_priors = None if priors is None else compute.read_priors(priors, net.output_dim)
    dev = device.select(use_gpu)
    n = 0
    with cmvn_mod.applier_for(cmvn, utt2spk, cmvn_opts) or contextlib.nullcontext() as applier, \
            tables.MatrixWriter(output_wspecifier) as writer:
        for key, feats in tables.read_matrices(feats_rspecifier):
            if applier is not None:
                feats = applier(key, feats)
            out = compute.log_posteriors(net, feats, key, feats_rspecifier, log_priors, dev)
            writer.write(key, np.exp(out) if apply_exp else out)
            n += 1
    logger.info(f"Processed {n} utterances.")
