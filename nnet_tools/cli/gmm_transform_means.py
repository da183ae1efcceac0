import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm
from nnet_tools.speech.transforms import matrix as transforms


@click.command()
@click.argument("matrix")
@click.argument("model_in")
@click.argument("model_out")
@program("nnet-gmm-transform-means")
def main(matrix, model_in, model_out):
    """Transform a GMM's means by a linear or affine matrix (Kaldi's gmm-transform-means), e.g.
    after an MLLT update changed the features.

    \b
    Example:
      nnet-gmm-transform-means exp/tri2/4.mat.new exp/tri2/4.mdl exp/tri2/4.mdl
    """
    mdl = gmm.load(model_in)
    gmm.transform_means(mdl, transforms.read_matrix(matrix), f"{matrix} with {model_in}")
    gmm.save(mdl, model_out)
    logger.info(f"Transformed the means of {gmm.num_gauss(mdl)} Gaussians by {matrix}; wrote {model_out}.")
