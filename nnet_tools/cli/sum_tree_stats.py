import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.models import tree_stats


@click.command()
@click.argument("tree_acc_out")
@click.argument("tree_accs_in", nargs=-1, required=True)
@program("nnet-sum-tree-stats")
def main(tree_acc_out, tree_accs_in):
    """Sum tree statistics of several jobs (Kaldi's sum-tree-stats).

    \b
    Example:
      nnet-sum-tree-stats exp/tri1/treeacc exp/tri1/1.treeacc exp/tri1/2.treeacc
    """
    total = tree_stats.sum_stats(tree_stats.load_stats(path) for path in tree_accs_in)
    logger.info(f"Wrote summed accs ( {len(total)} individual stats)")
    tree_stats.save_stats(tree_acc_out, total)
