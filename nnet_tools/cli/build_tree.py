import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm, questions as tree_questions, tree, tree_build, tree_stats


@click.command()
@click.option("--max-leaves", default=0, show_default=True, help="Stop splitting at this many leaves (0: no limit).")
@click.option("--thresh", default=300.0, show_default=True, help="Stop splitting when no split gains more than this.")
@click.option("--cluster-thresh", default=-1.0, show_default=True,
              help="Merge leaves of one root whose merge loses less than this (-1: the smallest split's gain).")
@click.option("--round-num-leaves", type=bool, default=True, show_default=True,
              help="Merge leaves down to a multiple of 8.")
@click.option("--context-width", default=3, show_default=True)
@click.option("--central-position", default=1, show_default=True)
@click.argument("tree_acc")
@click.argument("roots")
@click.argument("questions")
@click.argument("topo")
@click.argument("tree_out")
@program("nnet-build-tree")
def main(max_leaves, thresh, cluster_thresh, round_num_leaves, context_width, central_position,
         tree_acc, roots, questions, topo, tree_out):
    """Build a phonetic decision tree (Kaldi's compile-questions + build-tree): ROOTS is
    phones/roots.int, QUESTIONS the phone sets of nnet-cluster-phones plus extra_questions.int
    (compiled here, as compile-questions would: the same questions for every context position,
    and the pdf-class questions of TOPO). TREE_OUT is Kaldi's binary tree file.

    \b
    Example:
      nnet-build-tree --max-leaves 2000 exp/tri1/treeacc data/lang/phones/roots.int exp/tri1/questions.int data/lang/topo exp/tri1/tree
    """
    stats = tree_stats.load_stats(tree_acc)
    num_pdf_classes = gmm.read_topology(topo)[1].get_phone_to_num_pdf_classes()
    qs = tree_questions.compile_questions(tree_questions.read_int_sets(questions, "questions"), [], num_pdf_classes,
                                          context_width, central_position)
    logger.info(f"BuildTree: before building trees, {len(stats)} stats from {tree_acc}")
    t = tree_build.build_tree(stats, qs, tree_build.read_roots(roots), max_leaves, thresh, cluster_thresh, context_width,
                        central_position, num_pdf_classes, round_num_leaves)
    i = t.info
    logger.info(f"Split {i['num_leaves_before']} leaves into {i['num_leaves_split']}, total objf impr "
                f"{i['impr'] / max(i['frames'], 1):.6g} per frame over {i['frames']:g} frames.")
    logger.info(f"Setting clustering threshold to {i['cluster_thresh']:g}; clustering removed {i['num_removed']} leaves")
    logger.info(f"Objf per frame is {i['objf'] / max(i['frames'], 1):.6g} over {i['frames']:g} frames.")
    logger.info(f"Number of leaves is {t.num_pdfs}")
    tree.write_tree(tree_out, t)
    logger.info(f"Wrote tree to {tree_out}")
