import contextlib

import click
import numpy as np

from nnet_tools.evaluate import compute
from nnet_tools import device
from nnet_tools.model import model_io, priors as priors_mod
from nnet_tools.data import cmvn as cmvn_mod, tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import cmvn_options, program


@click.command(context_settings={"show_default": True})
@click.option("--apply-exp", is_flag=True, help="Write exp() of the output (posteriors instead of log-posteriors).")
@click.option("--use-priors", type=bool, default=True,
              help="Subtract the model's log-priors (stored by nnet-adjust-priors), giving the scaled "
                   "log-likelihoods a decoder wants; false: log-posteriors.")
@click.option("--priors", default=None, help="Kaldi vector file of priors (binary or text) to use instead "
              "of the model's.")
@click.option("--use-gpu", default="no", help="yes|wait (a CUDA GPU or fail), optional, no.")
@cmvn_options
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("output_wspecifier")
@program("nnet-compute")
def main(model, feats_rspecifier, output_wspecifier, apply_exp, use_priors, priors, use_gpu, cmvn, utt2spk,
         online_cmvn, cmvn_opts):
    """Run MODEL over every utterance of FEATS_RSPECIFIER and write its outputs as a matrix table:
    log-likelihoods (log-posterior - log-prior) when the model holds priors, else log-posteriors.
    Each utterance is computed in one pass (chunks of 4096 frames), its edges padded by
    repeating the first and last frames; short ones are computed several at a time.

    \b
    Examples:
      nnet-compute --cmvn scp:data/test/cmvn.scp --utt2spk data/test/utt2spk \\
          exp/nnet/final.mdl scp:data/test/feats.scp ark:- | latgen-faster-mapped ...
      nnet-compute --use-priors false exp/nnet/final.mdl scp:data/test/feats.scp ark,t:logpost.txt
    """
    net, model_priors = model_io.load(model, with_priors=True)
    log_priors = priors_mod.log_priors_for_decoding(model_priors, priors, use_priors, net.output_dim, model)
    logger.info(f"{model}: {priors_mod.log_prior_summary(log_priors)}")
    dev = device.select(use_gpu)
    done = failed = 0
    with cmvn_mod.applier_for(cmvn, utt2spk, cmvn_opts, online_cmvn) or contextlib.nullcontext() as applier, \
            tables.MatrixWriter(output_wspecifier) as writer:
        def nonempty():
            nonlocal failed
            for key, feats in tables.read_matrices(feats_rspecifier):
                if len(feats) == 0:  # as nnet3-compute: skipped, counted
                    logger.warning(f"{feats_rspecifier}: zero-length utterance: {key}")
                    failed += 1
                    continue
                yield key, feats if applier is None else applier(key, feats)

        for key, out in compute.log_posteriors_of_table(net, nonempty(), feats_rspecifier, log_priors, dev):
            writer.write(key, np.exp(out) if apply_exp else out)
            done += 1
        logger.info(f"Done {done} utterances, failed for {failed}")
        if not done:  # Kaldi exits 1 too; the writer then discards the empty output
            raise NnetError(f"{feats_rspecifier}: no utterance computed"
                            + (f" ({failed} of zero length)" if failed else ": no features read"))
