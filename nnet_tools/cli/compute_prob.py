import contextlib

import click

from nnet_tools.evaluate import compute
from nnet_tools import device
from nnet_tools.evaluate import diagnostics
from nnet_tools.data import egs
from nnet_tools.model import model_io
from nnet_tools.cli.common import cmvn_options, program
from nnet_tools.data import cmvn as cmvn_mod


@click.command()
@click.option("--use-gpu", default="no", help="yes|no; Kaldi computes diagnostics on CPU.")
@cmvn_options
@click.argument("model")
@click.argument("data", nargs=-1, required=True)
@program("nnet-compute-prob")
def main(model, data, use_gpu, cmvn, utt2spk, online_cmvn, cmvn_opts):
    """Log-likelihood and accuracy per frame of MODEL, on an egs archive (all label positions)
    or on a features table plus a targets table.

    \b
    Examples:
      nnet-compute-prob exp/nnet/10.mdl exp/egs/valid_diagnostic.egs
      nnet-compute-prob exp/nnet/final.mdl scp:data/test/feats.scp scp:data/test/targets.scp
      nnet-compute-prob --cmvn scp:data/test/cmvn.scp --utt2spk data/test/utt2spk \
          exp/nnet/final.mdl scp:data/test/feats.scp scp:data/test/targets.scp
    """
    if len(data) not in (1, 2):
        raise click.UsageError("give an egs archive, or a feats rspecifier and a targets rspecifier")
    net = model_io.load(model)
    dev = device.select(use_gpu)
    if len(data) == 1:
        if cmvn is not None:
            raise click.UsageError("--cmvn applies to a features table; egs were normalised when dumped")
        windows, labels = egs.EgsArchive(data[0]).all_frames(net)
        stats = diagnostics.compute_prob(net, windows, labels, dev)
    else:
        with cmvn_mod.applier_for(cmvn, utt2spk, cmvn_opts, online_cmvn) or contextlib.nullcontext() as applier:
            stats = compute.utterance_stats(net, data[0], data[1], dev, applier)
    stats.log()
