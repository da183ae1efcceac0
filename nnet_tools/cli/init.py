import click
import torch

from nnet_tools.data import vectors
from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text
from nnet_tools.model import config, model_io
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet
from nnet_tools.cli.common import SEED, program


@click.command(context_settings={"show_default": True})
@click.option("--srand", type=SEED, default=0, help="Seed for the random initial parameters.")
@click.option("--presoftmax-prior-scale", "prior_scale", default=None,
              help="Kaldi vector, text or binary (presoftmax_prior_scale.vec): fixed per-class scale before the output's log-softmax.")
@click.option("--output-dim-from", "dim_from", default=None,
              help="A GMM or Kaldi final.mdl (e.g. exp/mono_ali/final.mdl): the output layer gets its pdf count, "
                   "whatever the config says (Kaldi: output-layer dim=$(tree-info ... num-pdfs)).")
@click.option("--write-config", default=None, help="Write the config used (with --output-dim-from's dim) here, "
              "for steps/train_dnn.py --config.")
@click.argument("config_file")
@click.argument("model_out")
@program("nnet-init")
def main(config_file, model_out, srand, prior_scale, dim_from, write_config):
    """Initialise a model from a YAML config (see conf/*.yaml).

    \b
    Example:
      nnet-init --srand 0 conf/model.yaml exp/nnet/0.mdl
      nnet-init --presoftmax-prior-scale exp/nnet/presoftmax_prior_scale.vec conf/model.yaml exp/nnet/0.mdl
      nnet-init --output-dim-from exp/mono_ali/final.mdl --write-config exp/model.yaml conf/model.yaml exp/0.mdl
    """
    if dim_from is None:
        cfg, text = config.load(config_file), None
        if write_config:
            text = config.to_yaml(cfg)
    else:
        from nnet_tools.kaldi import gmm as kaldi_gmm
        num_pdfs = int(kaldi_gmm.load_tid2pdf(dim_from).max()) + 1
        cfg, text = config.load_with_output_dim(config_file, num_pdfs)
        logger.info(f"Output layer dim {num_pdfs}: the pdf count of {dim_from}")
    if write_config:
        write_text(write_config, text)
    torch.manual_seed(srand)
    try:
        model = Nnet(cfg)
    except RuntimeError as e:  # e.g. a dim too large to allocate
        raise NnetError(f"{config_file}: cannot build the model (not enough memory for its parameters?): "
                        f"{model_io.first_sentence(e)}") from None
    if prior_scale is not None:
        values = vectors.read_vector(prior_scale, "presoftmax prior scale")
        try:
            model.set_presoftmax_scale(values)
        except NnetError as e:
            raise NnetError(f"{prior_scale}: {e}") from None
        logger.info(f"Output layer scaled by the presoftmax prior scale in {prior_scale}")
    model_io.save(model, model_out)
    n = sum(p.numel() for p in model.parameters())
    logger.info(f"Initialized model with {n} parameters, left-context {model.left_context}, "
                f"right-context {model.right_context}; wrote {model_out}")
