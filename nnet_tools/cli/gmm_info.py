import click

from nnet_tools.cli.common import program
from nnet_tools.speech.models import gmm


@click.command()
@click.argument("model")
@program("nnet-gmm-info")
def main(model):
    """Print a GMM's sizes as Kaldi's gmm-info does: phones, pdfs, transition-ids, Gaussians,
    feature dimension (and the tree's context width: 1 for a monophone model).

    \b
    Example:
      nnet-gmm-info exp/tri1/final.mdl
    """
    mdl = gmm.load(model)
    print(f"number of phones {len(mdl.tm.phones)}\nnumber of pdfs {mdl.num_pdfs}\n"
          f"number of transition-ids {mdl.tm.num_transition_ids}\n"
          f"number of transition-states {mdl.tm.num_transition_states}\nfeature dimension {mdl.dim}\n"
          f"number of gaussians {gmm.num_gauss(mdl)}\ncontext width {mdl.tree().context_width}")
