import click

from nnet_tools.kaldi import am
from nnet_tools.cli.common import program


@click.command()
@click.argument("kaldi_model")
@click.argument("out")
@program("nnet-from-kaldi")
def main(kaldi_model, out):
    """Import a Kaldi nnet3 KALDI_MODEL (final.mdl or final.raw, binary or text) as an nnet-tools model
    OUT, with the final.mdl's priors, to fine-tune or evaluate it here. Supported: feed-forward
    nets of affine components (NaturalGradient-, Fixed-, plain), ReLU/sigmoid/tanh, batch-norm,
    dropout, a presoftmax FixedScaleComponent and a final log-softmax, spliced by
    Append(Offset(...)). Anything else (LSTMs, dim-range nodes, IfDefined, ...) is refused in one line.

    \b
    Example:
      nnet-from-kaldi exp/kaldi_tdnn/final.mdl exp/nnet/0.mdl
    """
    am.import_(kaldi_model, out)
