import click

from nnet_tools.model import partition
from nnet_tools.cli.common import SEED, program


@click.command(context_settings={"show_default": True})
@click.option("--partition", "partition_file", default=None,
              help="partition.yaml from nnet-split-submodels: sub-model J must be its sub-model J.")
@click.option("--output-scale", type=float, default=None,
              help="Factor on the output layer's concatenated weights and summed biases. "
                   "[default: 1/K, the mean of the sub-models' logits; 1 sums them]")
@click.option("--noise-fraction", type=float, default=0.02,
              help="Add Uniform(+-F*max|P|) to each weight matrix and bias vector P; 0 disables.")
@click.option("--srand", type=SEED, default=0, help="Seed for the noise.")
@click.argument("models", nargs=-1, required=True)
@program("nnet-merge-submodels")
def main(models, partition_file, output_scale, noise_fraction, srand):
    """Merge K trained sub-models into the full model: SUB1 ... SUBK MODEL_OUT.

    First-layer rows stacked, hidden-to-hidden weights block-diagonal (cross blocks 0), hidden
    biases and batch-norm statistics concatenated, output weights concatenated and scaled, then
    noise. Model files hold no optimiser state, so training the result starts afresh.

    \b
    Example:
      nnet-merge-submodels --partition exp/part/split/partition.yaml \\
          exp/part/sub.1/final.mdl exp/part/sub.2/final.mdl exp/part/merged.mdl
    """
    *inputs, out = models
    if not inputs:
        raise click.UsageError("need the sub-models and the output model")
    partition.merge_files(inputs, out, partition_file, output_scale, noise_fraction, srand)
