import click

from nnet_tools.kaldi import am
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--binary", type=bool, default=True, help="Write Kaldi's binary form (false: text).")
@click.option("--transition-model", default=None, metavar="GMM_MODEL",
              help="Write a final.mdl (TransitionModel + AmNnetSimple with the model's priors) with the "
                   "transition model of this GMM model (an nnet-gmm-* model file, or a Kaldi final.mdl); "
                   "without it, a raw nnet3 (final.raw).")
@click.argument("model")
@click.argument("out")
@program("nnet-to-kaldi")
def main(model, out, binary, transition_model):
    """Export MODEL to Kaldi's nnet3 format, as nnet3-am-init / nnet3-copy write it: affine layers
    (NaturalGradientAffineComponent), ReLU/sigmoid/tanh, batch-norm and dropout in test mode, TDNN
    splices as Append(Offset(...)) descriptors, the presoftmax scale and the log-softmax: the
    final.mdl that Kaldi's decoders (nnet3-latgen-faster) and vosk read. Apply the same CMVN to
    the features as the model was trained with.

    \b
    Examples:
      nnet-to-kaldi --transition-model exp/mono_ali/final.mdl exp/nnet/final.mdl exp/kaldi/final.mdl
      nnet-to-kaldi --binary false exp/nnet/final.mdl exp/kaldi/final.raw.txt
    """
    am.export(model, out, binary, transition_model)
