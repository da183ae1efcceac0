import click
import numpy as np

from nnet_tools.cli.common import program
from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm
from nnet_tools.speech.transforms import fmllr, weights


@click.command()
@click.option("--spk2utt", default=None,
              help="spk2utt file (or ark:FILE): one transform per speaker, keyed by speaker; else one per utterance.")
@click.option("--fmllr-update-type", default="full", show_default=True,
              help='Update type for fMLLR ("full"|"diag"|"offset"|"none").')
@click.option("--fmllr-min-count", default=fmllr.MIN_COUNT, show_default=True,
              help="Minimum count required to update fMLLR (below it: the unit transform [I 0]).")
@click.option("--fmllr-num-iters", default=fmllr.NUM_ITERS, show_default=True,
              help="Number of iterations in fMLLR update phase.")
@click.option("--silence-phones", default="", metavar="CSL",
              help="Colon-separated silence phones (lang/phones/silence.csl): their frames are weighted "
                   "--silence-weight (Kaldi's weight-silence-post).")
@click.option("--silence-weight", default=0.0, show_default=True, help="Weight of the --silence-phones' frames.")
@click.option("--posteriors", is_flag=True,
              help="ALI_RSPECIFIER holds posteriors on transition-ids (nnet-lattice-to-post), not alignments.")
@click.option("--gpost-model", default=None, metavar="MODEL",
              help="Take the Gaussian posteriors within each pdf from MODEL (same tree and sizes; Kaldi's "
                   "gmm-post-to-gpost MODEL | gmm-est-fmllr-gpost), e.g. the speaker-independent final.alimdl.")
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("trans_wspecifier")
@program("nnet-gmm-est-fmllr")
def main(spk2utt, fmllr_update_type, fmllr_min_count, fmllr_num_iters, silence_phones, silence_weight,
         posteriors, gpost_model, model, feats_rspecifier, ali_rspecifier, trans_wspecifier):
    """Estimate global fMLLR transforms, per speaker (--spk2utt) or per utterance (Kaldi's
    ali-to-post | weight-silence-post | gmm-est-fmllr): each frame's posteriors over the
    Gaussians of its aligned pdf in MODEL, then the d x (d+1) transform from [I 0]. Writes a
    table of matrices (TRANS_WSPECIFIER), which nnet-transform-feats --utt2spk applies. A
    speaker none of whose utterances has an alignment gets the unit transform, with a warning.
    With --posteriors, each frame counts for every transition-id of its posterior, by its weight
    (lattice-to-post | weight-silence-post | gmm-est-fmllr, as steps/decode_fmllr.sh runs it).

    To re-estimate on top of the current transforms (steps/train_sat.sh), give features
    already through them and compose: nnet-compose-transforms --b-is-affine true ark:NEW
    ark:OLD ark:OUT.

    \b
    Example:
      nnet-gmm-est-fmllr --spk2utt ark:data/train/split4/1/spk2utt --silence-phones 1:2:3:4:5 \\
          exp/tri3/4.mdl "ark:nnet-transform-feats --utt2spk ark:data/train/split4/1/utt2spk \\
          ark:exp/tri3/trans.1 ark:exp/tri3/si_feats.1.ark ark:- |" ark:exp/tri3/ali.1.ark ark:exp/tri3/tmp_trans.1
    """
    fmllr.check_options(fmllr_min_count, fmllr_num_iters, fmllr_update_type)
    if not cmvn.is_table(trans_wspecifier):
        raise NnetError(f"{trans_wspecifier}: the transforms are a table: give a wspecifier such as ark:trans.1")
    sil = weights.parse_phones(silence_phones)
    speakers = cmvn.read_spk2utt(spk2utt) if spk2utt else None
    spk_of = {}
    for spk, utts in (speakers or {}).items():
        for utt in utts:
            if utt in spk_of:
                raise NnetError(f"{spk2utt}: utterance '{utt}' listed for speakers '{spk_of[utt]}' and '{spk}'")
            spk_of[utt] = spk
    mdl = gmm.load(model)
    gpost_mdl = gmm.load(gpost_model) if gpost_model else None
    if gpost_mdl is not None and gpost_mdl.tid2pdf().tolist() != mdl.tid2pdf().tolist():
        raise NnetError(f"{gpost_model}: its transition-ids map to other pdfs than {model}'s (another tree?)")
    tid2pdf, tid2phone = mdl.tid2pdf(), weights.tid_to_phone(mdl)
    opts = dict(min_count=fmllr_min_count, num_iters=fmllr_num_iters, update_type=fmllr_update_type)
    accs = {spk: fmllr.FmllrAccs(mdl.dim) for spk in speakers} if speakers is not None else None
    aligned = set()      # speakers with at least one aligned utterance
    seen = set()
    done = no_ali = other = 0
    tot_impr = tot_t = 0.0
    reader = tables.RandomAccessPosteriors if posteriors else tables.RandomAccessIntVectors
    with reader(ali_rspecifier) as alis, tables.MatrixWriter(trans_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if speakers is not None and utt not in spk_of:
                continue        # not in this job's spk2utt (Kaldi reads the features by key)
            seen.add(utt)
            if utt not in alis:
                logger.warning(f"Did not find alignment for utterance {utt}")
                no_ali += 1
                continue
            ali = alis[utt]
            if not gmm.usable_features(feats, mdl.dim, f"{feats_rspecifier}: utt '{utt}'"):
                other += 1
                continue
            if len(ali) != len(feats):
                logger.warning(f"{'Posterior' if posteriors else 'Alignment'} has wrong size {len(ali)} vs. "
                               f"{len(feats)} for utterance {utt}")
                other += 1
                continue
            rows, tids, scale = _rows(ali, posteriors)
            gmm.check_tids(tids, mdl.tm.num_transition_ids, f"{ali_rspecifier}: utt '{utt}'")
            acc = accs[spk_of[utt]] if speakers is not None else fmllr.FmllrAccs(mdl.dim)
            acc.accumulate(mdl, feats[rows], tid2pdf[tids], scale * weights.frame_weights(tids, tid2phone, sil, silence_weight),
                           gpost_model=gpost_mdl)
            done += 1
            if speakers is not None:
                aligned.add(spk_of[utt])
                continue
            impr, count, _ = _estimate_and_write(writer, utt, acc, opts, f"utterance {utt}")
            tot_impr, tot_t = tot_impr + impr, tot_t + count
        num_spk = updated = 0
        for spk in speakers or ():
            for utt in speakers[spk]:
                if utt not in seen:
                    logger.warning(f"Did not find features for utterance {utt}")
                    other += 1
            num_spk += 1
            if spk not in aligned:
                logger.warning(f"No alignment for any utterance of speaker {spk}; writing the unit transform "
                               f"[I 0] for it")
                writer.write(spk, fmllr.unit_transform(mdl.dim))
                continue
            impr, count, changed = _estimate_and_write(writer, spk, accs[spk], opts, f"speaker {spk}")
            updated += changed
            tot_impr, tot_t = tot_impr + impr, tot_t + count
        logger.info(f"Done {done} files, {no_ali} with no alignments, {other} with other errors.")
        if speakers is not None:
            logger.info(f"Done {num_spk} speakers: {updated} transforms updated, {num_spk - len(aligned)} speakers "
                        f"without any aligned utterance.")
        logger.info(f"Overall fMLLR auxf impr per frame is {tot_impr / tot_t if tot_t > 0 else 0.0:.6g} "
                    f"over {tot_t:g} frames.")
        if not done:
            raise NnetError(f"{feats_rspecifier}: no utterance to estimate fMLLR from: {no_ali} without an "
                            f"alignment in {ali_rspecifier}, {other} with other errors")


def _rows(ali, posteriors):
    """(frame of each row, its transition-id, its weight): an alignment is one row per frame of
    weight 1; a posterior one row per (transition-id, weight) pair of each frame."""
    if not posteriors:
        return np.arange(len(ali)), np.asarray(ali, dtype=np.int64), np.ones(len(ali))
    pairs = [(t, tid, w) for t, frame in enumerate(ali) for tid, w in frame]
    rows, tids, scale = zip(*pairs) if pairs else ((), (), ())
    return np.array(rows, dtype=np.int64), np.array(tids, dtype=np.int64), np.array(scale, dtype=np.float64)


def _estimate_and_write(writer, key, acc, opts, who):
    try:
        result = acc.estimate(**opts, log=logger)
    except NnetError as e:
        raise NnetError(f"{who}: {e}") from None
    writer.write(key, result.matrix)
    per_frame = result.objf_impr / result.count if result.count > 0 else 0.0
    logger.info(f"For {who}, auxf-impr from fMLLR is {per_frame:.6g}, over {result.count:g} frames.")
    return result.objf_impr, result.count, result.updated
