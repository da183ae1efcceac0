import click

from nnet_tools.model import config, model_io
from nnet_tools.evaluate import model_info
from nnet_tools.cli.common import program


@click.command()
@click.argument("model")
@program("nnet-info")
def main(model):
    """Print a model's context, parameter count, nodes and components, with the statistics
    training stored in its nonlinearities, as nnet3-info; then its config.

    \b
    Example:
      nnet-info exp/nnet/final.mdl
    """
    net = model_io.load(model)
    print("\n".join(model_info.info_lines(net)))
    print(config.to_yaml(net.config), end="")
