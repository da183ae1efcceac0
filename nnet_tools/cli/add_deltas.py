import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.log import logger
from nnet_tools.speech.features import deltas


@click.command()
@click.option("--delta-order", default=2, show_default=True, help="Order of delta computation.")
@click.option("--delta-window", default=2, show_default=True, help="Regression window: +-this many frames.")
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-add-deltas")
def main(delta_order, delta_window, feats_rspecifier, feats_wspecifier):
    """Append delta and delta-delta features (Kaldi's add-deltas, same arithmetic).

    \b
    Example:
      nnet-add-deltas "ark:nnet-apply-cmvn --utt2spk=ark:data/train/utt2spk scp:data/train/cmvn.scp scp:data/train/feats.scp ark:- |" ark:-
    """
    deltas.check_delta_options(delta_order, delta_window)
    n = 0
    with tables.MatrixWriter(feats_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if not len(feats):
                logger.warning(f"Empty feature matrix for utterance {utt}")  # Kaldi's words; skipped
                continue
            writer.write(utt, deltas.add_deltas(feats, delta_order, delta_window))
            n += 1
    logger.info(f"Processed {n} utterances.")
