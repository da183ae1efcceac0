import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.transforms import splice


@click.command()
@click.option("--left-context", default=4, show_default=True, help="Number of frames of left context.")
@click.option("--right-context", default=4, show_default=True, help="Number of frames of right context.")
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-splice-feats")
def main(left_context, right_context, feats_rspecifier, feats_wspecifier):
    """Splice features with left and right context, e.g. prior to LDA (Kaldi's splice-feats):
    frame t becomes frames t-left .. t+right side by side, the first and last frames repeated
    past the edges.

    \b
    Example:
      nnet-splice-feats --left-context 3 --right-context 3 scp:data/train/feats.scp ark:- | \\
          nnet-transform-feats exp/tri2/0.mat ark:- ark:spliced.ark
    """
    splice.check_context(left_context, right_context)
    n = 0
    with tables.MatrixWriter(feats_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if not len(feats) or not feats.shape[1]:
                logger.warning(f"Empty feature matrix for utterance {utt}")   # Kaldi dies here; we skip it
                continue
            writer.write(utt, splice.splice_frames(feats, left_context, right_context))
            n += 1
        if not n:
            raise NnetError(f"{feats_rspecifier}: no features to splice")
    logger.info(f"Spliced {n} utterances.")
