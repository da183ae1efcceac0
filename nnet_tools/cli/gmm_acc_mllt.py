import click
import numpy as np

from nnet_tools.cli.common import SEED, program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm
from nnet_tools.speech.transforms import mllt, weights


@click.command()
@click.option("--rand-prune", default=0.25, show_default=True,
              help="Randomized pruning parameter to speed up accumulation (larger -> more pruning; may exceed one).")
@click.option("--srand", type=SEED, default=0, show_default=True, help="Seed of that pruning.")
@click.option("--silence-phones", default="", metavar="CSL",
              help="Colon-separated silence phones (lang/phones/silence.csl): their frames are weighted "
                   "--silence-weight (Kaldi's weight-silence-post).")
@click.option("--silence-weight", default=0.0, show_default=True, help="Weight of the --silence-phones' frames.")
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("acc_out")
@program("nnet-gmm-acc-mllt")
def main(rand_prune, srand, silence_phones, silence_weight, model, feats_rspecifier, ali_rspecifier, acc_out):
    """Accumulate MLLT (global STC) statistics (Kaldi's ali-to-post | weight-silence-post |
    gmm-acc-mllt): each frame's posteriors over the Gaussians of its aligned pdf in MODEL. The
    features are the model's (already through the current transform).

    \b
    Example:
      nnet-gmm-acc-mllt --rand-prune 4.0 --silence-phones 1:2:3:4:5 exp/tri2/2.mdl \\
          "ark:nnet-splice-feats scp:feats.scp ark:- | nnet-transform-feats exp/tri2/0.mat ark:- ark:- |" \\
          "ark:gunzip -c exp/tri2/ali.1.gz |" exp/tri2/2.1.macc
    """
    weights.check_rand_prune(rand_prune)
    sil = weights.parse_phones(silence_phones)
    mdl = gmm.load(model)
    tid2pdf, tid2phone = mdl.tid2pdf(), weights.tid_to_phone(mdl)
    feats_all, pdfs, frame_w = [], [], []
    done = no_ali = other = 0
    with tables.RandomAccessIntVectors(ali_rspecifier) as alis:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if utt not in alis:
                no_ali += 1
                continue
            ali = alis[utt]
            if not gmm.usable_features(feats, mdl.dim, f"{feats_rspecifier}: utt '{utt}'"):
                other += 1
                continue
            if len(ali) != len(feats):
                logger.warning(f"Alignment has wrong size {len(ali)} vs. {len(feats)} for utterance {utt}")
                other += 1
                continue
            gmm.check_tids(ali, mdl.tm.num_transition_ids, f"{ali_rspecifier}: utt '{utt}'")
            feats_all.append(feats)
            pdfs.append(tid2pdf[ali])
            frame_w.append(weights.frame_weights(ali, tid2phone, sil, silence_weight))
            done += 1
    logger.info(f"Done {done} files, {no_ali} with no alignments, {other} with other errors.")
    if not done:
        raise NnetError(f"{feats_rspecifier}: no utterance to accumulate: {no_ali} without an alignment in "
                        f"{ali_rspecifier}, {other} with other errors")
    accs = mllt.MlltAccs(mdl.dim, rand_prune)
    w = np.concatenate(frame_w)
    like = accs.accumulate(mdl, np.concatenate(feats_all), np.concatenate(pdfs), w, np.random.default_rng(srand))
    tot_t = float(w.sum())
    avg = float((like * w).sum()) / tot_t if tot_t > 0 else 0.0
    logger.info(f"Overall avg like per frame (Gaussian only) = {avg:.6g} over {tot_t:g} frames.")
    accs.save(acc_out)
    logger.info("Written accs.")
