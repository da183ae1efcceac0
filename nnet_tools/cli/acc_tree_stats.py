import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import align, gmm, tree_stats


def phone_list(csl, option):
    """A colon-separated list of phone ids (Kaldi's phones/*.csl), '' for none."""
    try:
        return [int(p) for p in csl.split(":")] if csl else []
    except ValueError:
        raise NnetError(f"{option} must be colon-separated phone ids, got '{csl}'") from None


@click.command()
@click.option("--ci-phones", default="", help="Colon-separated context-independent phones (phones/context_indep.csl).")
@click.option("--context-width", default=3, show_default=True)
@click.option("--central-position", default=1, show_default=True)
@click.argument("model")
@click.argument("feats_rspecifier")
@click.argument("ali_rspecifier")
@click.argument("tree_acc_out")
@program("nnet-acc-tree-stats")
def main(ci_phones, context_width, central_position, model, feats_rspecifier, ali_rspecifier, tree_acc_out):
    """Accumulate the statistics for building a decision tree (Kaldi's acc-tree-stats): per
    phone-in-context and HMM state, the count, sum and sum of squares of its frames.

    \b
    Example:
      nnet-acc-tree-stats --ci-phones 1:2:3 exp/mono_ali/final.mdl ark:exp/tri1/feats.1.ark ark:exp/mono_ali/ali.1.ark exp/tri1/1.treeacc
    """
    mdl = gmm.load(model)
    table, ci = mdl.tid_table(), phone_list(ci_phones, "--ci-phones")
    stats, done, no_ali, bad = {}, 0, 0, 0
    with tables.RandomAccessIntVectors(ali_rspecifier) as alis:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if utt not in alis:
                logger.warning(f"No alignment for utterance {utt}")
                no_ali += 1
                continue
            ali = alis[utt]
            if len(ali) != len(feats):
                logger.warning(f"Alignments has wrong length {len(ali)} vs. {len(feats)} for utterance {utt}")
                bad += 1
                continue
            gmm.check_tids(ali, mdl.tm.num_transition_ids, f"{ali_rspecifier}: utt '{utt}'")
            segments = align.phone_segments(table, ali)
            tree_stats.accumulate_tree_stats(stats, feats, [p for p, _ in segments], [c for _, c in segments],
                                             context_width, central_position, ci)
            done += 1
    logger.info(f"Accumulated stats for {done} files, {no_ali} failed due to no alignment, {bad} failed for other reasons.")
    if not stats:
        raise NnetError(f"{feats_rspecifier}: no utterance had an alignment in {ali_rspecifier}")
    logger.info(f"Number of separate stats (context-dependent states) is {len(stats)}")
    tree_stats.save_stats(tree_acc_out, stats)
