import click

from nnet_tools.model import model_io
from nnet_tools.evaluate import progress
from nnet_tools.cli.common import program


@click.command()
@click.argument("old_model")
@click.argument("new_model")
@program("nnet-show-progress")
def main(old_model, new_model):
    """Per-layer parameter change from OLD_MODEL to NEW_MODEL (nnet3-show-progress).

    \b
    Example:
      nnet-show-progress exp/nnet/9.mdl exp/nnet/10.mdl
    """
    progress.show_progress(model_io.load(old_model), model_io.load(new_model), old_model, new_model)
