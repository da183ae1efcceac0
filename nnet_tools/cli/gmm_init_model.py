import click
import numpy as np

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm, tree, tree_stats


@click.command()
@click.option("--var-floor", default=0.01, show_default=True, help="Floor of the Gaussians' variances.")
@click.option("--write-occs", default="", help="Write the pdfs' occupancies here (for nnet-gmm-mixup).")
@click.argument("tree_in")
@click.argument("tree_acc")
@click.argument("topo")
@click.argument("model_out")
@program("nnet-gmm-init-model")
def main(var_floor, write_occs, tree_in, tree_acc, topo, model_out):
    """Initialise a GMM from a decision tree and the tree statistics: one Gaussian per leaf
    (Kaldi's gmm-init-model). The model keeps the tree.

    \b
    Example:
      nnet-gmm-init-model --write-occs exp/tri1/1.occs exp/tri1/tree exp/tri1/treeacc data/lang/topo exp/tri1/1.mdl
    """
    ctx = tree.read_tree(tree_in)
    leaf_stats = tree.stats_per_leaf(tree.tree_from_context_dependency(ctx), tree_stats.load_stats(tree_acc))
    topo_text, _ = gmm.read_topology(topo)
    mdl = gmm.init_from_leaf_stats(topo_text, ctx, leaf_stats, var_floor, log=logger)
    if write_occs:
        tables.write_vector(write_occs, np.array([0.0 if g is None else g.count for g in leaf_stats]))
    gmm.save(mdl, model_out)
    logger.info(f"Wrote {model_out}: {mdl.num_pdfs} pdfs, {mdl.tm.num_transition_ids} transition-ids.")
