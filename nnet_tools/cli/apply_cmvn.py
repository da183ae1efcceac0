import click

from nnet_tools.data import cmvn, tables
from nnet_tools.data.finite import require_finite
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--utt2spk", default=None, help="utt2spk file: the statistics are keyed by speaker.")
@click.option("--norm-means", type=bool, default=True, help="Subtract the mean (false: copy unchanged).")
@click.option("--norm-vars", type=bool, default=False, help="Also scale to unit variance.")
@click.argument("cmvn_stats")
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-apply-cmvn")
def main(cmvn_stats, feats_rspecifier, feats_wspecifier, utt2spk, norm_means, norm_vars):
    """Apply CMVN statistics to features (Kaldi's apply-cmvn). CMVN_STATS is a table of
    statistics (per speaker with --utt2spk, else per utterance) or one global matrix file.
    An utterance without statistics is warned about and skipped, as Kaldi does.

    \b
    Example:
      nnet-apply-cmvn --utt2spk=data/train/utt2spk scp:data/train/cmvn.scp \\
          scp:data/train/feats.scp ark:- | nnet-compute exp/nnet/final.mdl ark:- ark:out.ark
    """
    done = errors = 0
    with cmvn.CmvnApplier(cmvn_stats, utt2spk, norm_means, norm_vars) as applier, \
            tables.MatrixWriter(feats_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            require_finite(feats, f"{feats_rspecifier}: utterance '{utt}'")
            try:
                normalised = applier(utt, feats)
            except cmvn.MissingStats as e:
                logger.warning(f"{e}; producing no output for this utterance")
                errors += 1
                continue
            writer.write(utt, normalised)
            done += 1
        what = "mean and variance" if norm_vars else "mean"
        if norm_means:
            logger.info(f"Applied cepstral {what} normalization to {done} utterances, errors on {errors}")
        else:
            logger.info(f"Copied {done} utterances unchanged (--norm-means=false), errors on {errors}")
        if not done:  # Kaldi exits 1 here too; the writer's exit then discards the empty output
            raise NnetError(f"{feats_rspecifier}: no utterance normalised: "
                            + (f"none of the {errors} had statistics in {cmvn_stats}" if errors else "no features read"))
