import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm, likelihoods


@click.command()
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("loglikes_wspecifier")
@program("nnet-gmm-compute-likes")
def main(model, feats_rspecifier, loglikes_wspecifier):
    """Write each frame's log-likelihood under every pdf's GMM (Kaldi's gmm-compute-likes).

    \b
    Example:
      nnet-gmm-compute-likes exp/mono/final.mdl ark:feats.ark ark:- | nnet-decode-faster-mapped ...
    """
    mdl = gmm.load(model)
    n = 0
    with tables.MatrixWriter(loglikes_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if not gmm.usable_features(feats, mdl.dim, f"{feats_rspecifier}: utt '{utt}'"):
                continue
            writer.write(utt, likelihoods.compute_likes(mdl, feats))
            n += 1
    logger.info(f"Processed {n} utterances.")
