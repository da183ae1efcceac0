import click
import numpy as np

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import align, gmm, tree


@click.command()
@click.argument("old_model")
@click.argument("new_model")
@click.argument("new_tree")
@click.argument("old_ali_rspecifier")
@click.argument("new_ali_wspecifier")
@program("nnet-convert-ali")
def main(old_model, new_model, new_tree, old_ali_rspecifier, new_ali_wspecifier):
    """Convert alignments from one model to another with the same topology (Kaldi's
    convert-ali): the same phones, HMM states and transitions, with the new tree's pdfs.

    \b
    Example:
      nnet-convert-ali exp/mono_ali/final.mdl exp/tri1/1.mdl exp/tri1/tree ark:exp/mono_ali/ali.1.ark ark:exp/tri1/ali.1.ark
    """
    old, new = gmm.load(old_model), gmm.load(new_model)
    if old.topo_text != new.topo_text:
        raise NnetError(f"{old_model} and {new_model} have different topologies")
    if not np.array_equal(gmm.tree_bytes(tree.read_tree(new_tree)), gmm.tree_bytes(new.tree())):
        raise NnetError(f"{new_tree} is not the tree of {new_model}")
    converter = align.AlignmentConverter(old, new)
    done = 0
    with tables.IntVectorWriter(new_ali_wspecifier) as writer:
        for utt, ali in tables.read_int_vectors(old_ali_rspecifier):
            gmm.check_tids(ali, old.tm.num_transition_ids, f"{old_ali_rspecifier}: utt '{utt}'")
            writer.write(utt, converter.convert(ali, f"{old_ali_rspecifier}: utt '{utt}'"))
            done += 1
    logger.info(f"Succeeded converting alignments for {done} files, failed for 0")
