import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import estimate, gmm


@click.command()
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("acc_out")
@program("nnet-gmm-acc-stats-ali")
def main(model, feats_rspecifier, ali_rspecifier, acc_out):
    """Accumulate GMM and transition statistics from alignments (Kaldi's gmm-acc-stats-ali).

    \b
    Example:
      nnet-gmm-acc-stats-ali exp/mono/4.mdl ark:exp/mono/feats.1.ark ark:exp/mono/ali.1.ark exp/mono/4.1.acc
    """
    mdl = gmm.load(model)
    utts, no_ali, bad = [], 0, 0
    with tables.RandomAccessIntVectors(ali_rspecifier) as alis:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if utt not in alis:
                no_ali += 1
                continue
            ali = alis[utt]
            if not gmm.usable_features(feats, mdl.dim, f"{feats_rspecifier}: utt '{utt}'"):
                bad += 1
                continue
            if len(ali) != len(feats):
                logger.warning(f"Alignment has wrong size {len(ali)} vs. {len(feats)} for utterance {utt}")
                bad += 1
                continue
            gmm.check_tids(ali, mdl.tm.num_transition_ids, f"{ali_rspecifier}: utt '{utt}'")
            utts.append((feats, ali))
    logger.info(f"Done {len(utts)} files, {no_ali} with no alignments, {bad} with other errors.")
    if not utts:
        raise NnetError(f"{feats_rspecifier}: no utterance to accumulate: {no_ali} without an alignment in "
                        f"{ali_rspecifier}, {bad} with other errors")
    stats = estimate.Stats(mdl)
    estimate.accumulate(mdl, stats, utts)
    stats.save(acc_out)
    logger.info(f"Overall avg like per frame (Gaussian only) = {stats.tot_like / stats.frames:.6g} over "
                f"{stats.frames} frames.")
