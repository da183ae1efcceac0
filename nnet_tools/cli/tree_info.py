import click

from nnet_tools.cli.common import program
from nnet_tools.speech.models import tree


@click.command()
@click.argument("tree_in")
@program("nnet-tree-info")
def main(tree_in):
    """Print a tree's number of leaves (pdfs), context width and central position (Kaldi's tree-info).

    \b
    Example:
      nnet-tree-info exp/tri1/tree
    """
    ctx = tree.read_tree(tree_in)
    print(f"num-pdfs {ctx.num_pdfs}\ncontext-width {ctx.context_width}\ncentral-position {ctx.central_position}")
