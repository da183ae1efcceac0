import click
import numpy as np

from nnet_tools.cli.common import SEED, program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm
from nnet_tools.speech.transforms import lda, weights


@click.command()
@click.option("--rand-prune", default=0.0, show_default=True,
              help="Randomized pruning threshold for posteriors (a frame of weight w < this is kept with "
                   "probability w / this, at weight this).")
@click.option("--srand", type=SEED, default=0, show_default=True, help="Seed of that pruning.")
@click.option("--silence-phones", default="", metavar="CSL",
              help="Colon-separated silence phones (lang/phones/silence.csl): their frames are weighted "
                   "--silence-weight (Kaldi's weight-silence-post).")
@click.option("--silence-weight", default=0.0, show_default=True, help="Weight of the --silence-phones' frames.")
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("acc_out")
@program("nnet-acc-lda")
def main(rand_prune, srand, silence_phones, silence_weight, model, feats_rspecifier, ali_rspecifier, acc_out):
    """Accumulate LDA statistics based on pdf-ids (Kaldi's ali-to-post | weight-silence-post |
    acc-lda). The alignments are transition-ids of MODEL, mapped to its pdf-ids (the classes);
    the features are those the LDA will transform (spliced, not yet transformed).

    \b
    Example:
      nnet-acc-lda --rand-prune 4.0 --silence-phones 1:2:3:4:5 exp/tri1_ali/final.mdl \\
          "ark:nnet-splice-feats scp:data/train/split4/1/feats.scp ark:- |" \\
          "ark:gunzip -c exp/tri1_ali/ali.1.gz |" exp/tri2/lda.1.acc
    """
    weights.check_rand_prune(rand_prune)
    sil = weights.parse_phones(silence_phones)
    mdl = gmm.load(model)
    tid2pdf, tid2phone = mdl.tid2pdf(), weights.tid_to_phone(mdl)
    rng = np.random.default_rng(srand)
    stats, done, failed = None, 0, 0
    with tables.RandomAccessIntVectors(ali_rspecifier) as alis:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if utt not in alis:
                logger.warning(f"No alignment for utterance {utt}")
                failed += 1
                continue
            ali = alis[utt]
            if not gmm.usable_features(feats, None, f"{feats_rspecifier}: utt '{utt}'"):
                failed += 1
                continue
            if stats is None:
                stats = lda.LdaEstimate(mdl.num_pdfs, feats.shape[1])
            if len(ali) != len(feats):
                logger.warning(f"Alignment vs. feats size mismatch {len(ali)} vs. {len(feats)} for utterance {utt}")
                failed += 1
                continue
            if feats.shape[1] != stats.dim:
                raise NnetError(f"{feats_rspecifier}: utt '{utt}': feature dimension mismatch {feats.shape[1]} "
                                f"vs. {stats.dim} of the utterances before it")
            gmm.check_tids(ali, mdl.tm.num_transition_ids, f"{ali_rspecifier}: utt '{utt}'")
            w = weights.rand_prune(weights.frame_weights(ali, tid2phone, sil, silence_weight), rand_prune, rng)
            stats.accumulate(feats, tid2pdf[ali], w)
            done += 1
            if done % 100 == 0:
                logger.info(f"Done {done} utterances.")
    logger.info(f"Done {done} files, failed for {failed}")
    if not done:
        raise NnetError(f"{feats_rspecifier}: no utterance to accumulate ({failed} failed: no alignment in "
                        f"{ali_rspecifier}, or a length mismatch)")
    stats.save(acc_out)
    logger.info("Written statistics.")
