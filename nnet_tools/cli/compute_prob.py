import click

from .. import device, diagnostics, egs, model_io
from .common import program


@click.command()
@click.option("--use-gpu", default="no", help="yes|no; Kaldi computes diagnostics on CPU.")
@click.argument("model")
@click.argument("egs_archive")
@program("nnet-compute-prob")
def main(model, egs_archive, use_gpu):
    """Log-likelihood and accuracy per frame of MODEL on an egs archive (all label positions).

    \b
    Example:
      nnet-compute-prob exp/nnet/10.mdl exp/nnet/egs/valid_diagnostic.egs
    """
    net = model_io.load(model)
    windows, labels = egs.EgsArchive(egs_archive).all_frames(net)
    diagnostics.compute_prob(net, windows, labels, device.select(use_gpu)).log()
