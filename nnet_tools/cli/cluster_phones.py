import click

from nnet_tools.cli.common import program
from nnet_tools.fileio import write_text
from nnet_tools.log import logger
from nnet_tools.speech.models import questions as tree_questions, tree_stats


@click.command()
@click.option("--pdf-class-list", default="1", show_default=True,
              help="Colon-separated pdf-classes whose statistics the clustering uses (1: the middle state).")
@click.option("--central-position", default=1, show_default=True)
@click.option("--seed", default=0, show_default=True, help="Of the 2-means starts.")
@click.argument("tree_acc")
@click.argument("phone_sets")
@click.argument("questions_out")
@program("nnet-cluster-phones")
def main(pdf_class_list, central_position, seed, tree_acc, phone_sets, questions_out):
    """Cluster phones top-down by their statistics into questions for tree building (Kaldi's
    cluster-phones): PHONE_SETS is phones/sets.int, the output a set of phone ids per line.

    \b
    Example:
      nnet-cluster-phones exp/tri1/treeacc data/lang/phones/sets.int exp/tri1/questions.int
    """
    classes = [int(c) for c in pdf_class_list.split(":")]
    questions = tree_questions.cluster_phones(tree_stats.load_stats(tree_acc), tree_questions.read_int_sets(phone_sets),
                                              classes, central_position, include_full_set=False, seed=seed)
    write_text(questions_out, "".join(" ".join(map(str, q)) + "\n" for q in questions))
    logger.info(f"Wrote {len(questions)} questions to {questions_out}")
