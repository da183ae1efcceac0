import click

from nnet_tools import heap
from nnet_tools.train import average
from nnet_tools.model import model_io
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import program


def parse_weights(text):
    try:
        return [float(x) for x in text.split(":")]
    except ValueError:
        raise NnetError(f"--weights: expected colon-separated numbers w1:w2:..., got {text!r}") from None


@click.command()
@click.option("--weights", default=None, help="Colon-separated weights w1:w2:...; normalized to sum to one.")
@click.argument("models", nargs=-1, required=True)
@program("nnet-average-models")
def main(models, weights):
    """Average the parameters and batch-norm statistics of N models: MODEL1 ... MODELN MODEL_OUT.

    Streams like Kaldi's nnet3-average: memory is the output model plus about 40 MB, whatever N;
    each tensor is summed in float64.

    \b
    Example:
      nnet-average-models exp/nnet/8.1.mdl exp/nnet/8.2.mdl exp/nnet/8.3.mdl exp/nnet/8.mdl
    """
    heap.return_freed_memory()   # the peak memory of many large models matters here, not speed
    *inputs, out = models
    if not inputs:
        raise click.UsageError("need at least one input model and the output model")
    w = average.normalized_weights(None if weights is None else parse_weights(weights), len(inputs))
    model_io.save(average.average_files(list(inputs), w), out, priors=model_io.priors(inputs[0]))
    logger.info(f"Averaged parameters of {len(inputs)} neural nets, and wrote to {out}")
