import click

from nnet_tools.train import average
from nnet_tools.model import model_io
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command()
@click.option("--weights", default=None, help="Colon-separated weights w1:w2:...; normalized to sum to one.")
@click.argument("models", nargs=-1, required=True)
@program("nnet-average-models")
def main(models, weights):
    """Average the parameters and batch-norm statistics of N models: MODEL1 ... MODELN MODEL_OUT.

    \b
    Example:
      nnet-average-models exp/nnet/8.1.mdl exp/nnet/8.2.mdl exp/nnet/8.3.mdl exp/nnet/8.mdl
    """
    *inputs, out = models
    if not inputs:
        raise click.UsageError("need at least one input model and the output model")
    nets = [model_io.load(p) for p in inputs]
    average.check_same_structure(nets, inputs)
    average.check_finite(nets, inputs)
    w = average.normalized_weights(None if weights is None else [float(x) for x in weights.split(":")], len(nets))
    model_io.save(average.average_into(nets[0], nets, w), out)
    logger.info(f"Averaged parameters of {len(nets)} neural nets, and wrote to {out}")
