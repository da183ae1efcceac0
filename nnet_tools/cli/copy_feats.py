import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger


@click.command()
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-copy-feats")
def main(feats_rspecifier, feats_wspecifier):
    """Copy features from a table to another (Kaldi's copy-feats): e.g. to dump a feature pipe
    once instead of running it every pass.

    \b
    Example:
      nnet-copy-feats "ark:nnet-apply-cmvn --utt2spk data/train/utt2spk scp:data/train/cmvn.scp scp:data/train/feats.scp ark:- |" ark:exp/tri1/feats.1.ark
    """
    n = 0
    with tables.MatrixWriter(feats_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            writer.write(utt, feats)
            n += 1
        logger.info(f"Copied {n} feature matrices.")
        if not n:  # Kaldi's copy-feats exits 1 too; the writer's exit then discards the empty output
            raise NnetError(f"{feats_rspecifier}: no feature matrices to copy")
