import contextlib

import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import estimate, gmm


# Utterances are accumulated in blocks of about this many frames: memory stays bounded however
# much data a job has (a job of 1.4M frames held them all: 1 GB resident).
BLOCK_FRAMES = 1 << 18


@click.command()
@click.option("--stats-feats", "stats_rspecifier", default="",
              help="Accumulate the moments of these features, each frame weighted by its posteriors on "
                   "FEATS_RSPECIFIER (Kaldi's gmm-acc-stats-twofeats).")
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("acc_out")
@program("nnet-gmm-acc-stats-ali")
def main(stats_rspecifier, model, feats_rspecifier, ali_rspecifier, acc_out):
    """Accumulate GMM and transition statistics from alignments (Kaldi's gmm-acc-stats-ali).

    \b
    Example:
      nnet-gmm-acc-stats-ali exp/mono/4.mdl ark:exp/mono/feats.1.ark ark:exp/mono/ali.1.ark exp/mono/4.1.acc
    SAT's alignment model (posteriors from the adapted features, moments from the unadapted):
      nnet-gmm-acc-stats-ali --stats-feats ark:si_feats.1.ark exp/tri3/final.mdl ark:exp/tri3/feats.1.ark \\
        ark:exp/tri3/ali.1.ark exp/tri3/final.1.acc
    """
    mdl = gmm.load(model)
    stats = estimate.Stats(mdl)
    utts, moments, held, no_ali, bad, done = [], [], 0, 0, 0, 0

    def flush():   # accumulate what is held (vectorised per pdf over its frames), and drop it
        nonlocal utts, moments, held
        estimate.accumulate(mdl, stats, utts, moments if stats_rspecifier else None)
        utts, moments, held = [], [], 0

    with contextlib.ExitStack() as stack:
        alis = stack.enter_context(tables.RandomAccessIntVectors(ali_rspecifier))
        second = stack.enter_context(tables.RandomAccessMatrices(stats_rspecifier)) if stats_rspecifier else None
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if utt not in alis or (second is not None and utt not in second):
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
            if second is not None:
                x = second[utt]
                if x.shape != feats.shape:
                    raise NnetError(f"{stats_rspecifier}: utt '{utt}' has {x.shape[0]} frames of dim {x.shape[1]}, "
                                    f"{feats_rspecifier} {feats.shape[0]} of dim {feats.shape[1]}")
                moments.append(x)
            utts.append((feats, ali))
            done, held = done + 1, held + len(feats)
            if held >= BLOCK_FRAMES:
                flush()
        flush()
    logger.info(f"Done {done} files, {no_ali} with no alignments{' or second features' if second else ''}, "
                f"{bad} with other errors.")
    if not done:
        raise NnetError(f"{feats_rspecifier}: no utterance to accumulate: {no_ali} without an alignment in "
                        f"{ali_rspecifier}, {bad} with other errors")
    stats.save(acc_out)
    logger.info(f"Overall avg like per frame (Gaussian only) = {stats.tot_like / stats.frames:.6g} over "
                f"{stats.frames} frames.")
