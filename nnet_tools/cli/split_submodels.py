import click

from nnet_tools.data import vectors
from nnet_tools.errors import NnetError
from nnet_tools.model import partition
from nnet_tools.model.nnet import presoftmax_scale
from nnet_tools.cli.common import SEED, program


@click.command(context_settings={"show_default": True})
@click.option("--srand", type=SEED, default=0, help="Seed for the sub-models' random initial parameters.")
@click.option("--allow-uneven", is_flag=True, help="Allow hidden widths K does not divide (blocks then differ by one unit).")
@click.option("--presoftmax-prior-scale", "prior_scale", default=None,
              help="Kaldi vector (presoftmax_prior_scale.vec): the full model's fixed output scale, given to "
                   "every sub-model. [default: a model file's own, else none]")
@click.argument("config_or_model")
@click.argument("k", type=int)
@click.argument("out_dir")
@program("nnet-split-submodels")
def main(config_or_model, k, out_dir, srand, allow_uneven, prior_scale):
    """Split a model (its YAML config, or a model file's config) into K narrow sub-models.

    Every hidden layer is cut into K blocks of units; sub-model J owns block J of each and keeps
    all inputs and all outputs. Writes OUT_DIR/sub.J.yaml (config), OUT_DIR/sub.J.mdl (its own
    seeded random init) for J = 1..K, and OUT_DIR/partition.yaml, which nnet-merge-submodels
    reads to check that the trained sub-models belong together.

    \b
    Example:
      nnet-split-submodels --srand 0 conf/mlp.yaml 2 exp/part/split
    """
    cfg, scale = partition.read_full(config_or_model)
    if prior_scale is not None:
        try:
            scale = presoftmax_scale(vectors.read_vector(prior_scale, "presoftmax prior scale"),
                                     cfg["layers"][-1]["dim"])
        except NnetError as e:
            raise NnetError(f"{prior_scale}: {e}") from None
    partition.split_to_dir(cfg, k, out_dir, srand, allow_uneven, where=config_or_model, presoftmax_scale=scale)
