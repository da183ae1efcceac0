import click

from nnet_tools.report import compute
from nnet_tools import device
from nnet_tools.report import diagnostics
from nnet_tools.data import egs
from nnet_tools.model import model_io
from nnet_tools.cli.common import program


@click.command()
@click.option("--use-gpu", default="no", help="yes|no; Kaldi computes diagnostics on CPU.")
@click.argument("model")
@click.argument("data", nargs=-1, required=True)
@program("nnet-compute-prob")
def main(model, data, use_gpu):
    """Log-likelihood and accuracy per frame of MODEL, on an egs archive (all label positions)
    or on a features table plus a targets table.

    \b
    Examples:
      nnet-compute-prob exp/nnet/10.mdl exp/egs/valid_diagnostic.egs
      nnet-compute-prob exp/nnet/final.mdl scp:data/test/feats.scp scp:data/test/targets.scp
    """
    if len(data) not in (1, 2):
        raise click.UsageError("give an egs archive, or a feats rspecifier and a targets rspecifier")
    net = model_io.load(model)
    dev = device.select(use_gpu)
    if len(data) == 1:
        windows, labels = egs.EgsArchive(data[0]).all_frames(net)
        stats = diagnostics.compute_prob(net, windows, labels, dev)
    else:
        stats = compute.utterance_stats(net, data[0], data[1], dev)
    stats.log()
