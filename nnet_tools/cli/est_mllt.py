import click
import numpy as np

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.transforms import matrix, mllt


@click.command()
@click.option("--binary", type=bool, default=True, show_default=True, help="Write output in binary mode.")
@click.argument("matrix_out")
@click.argument("accs", nargs=-1, required=True)
@program("nnet-est-mllt")
def main(binary, matrix_out, accs):
    """Do the update for MLLT, also known as STC (Kaldi's est-mllt), from the summed statistics
    of nnet-gmm-acc-mllt: a dim x dim matrix, from the unit matrix by Kaldi's 200 row-by-row
    passes. Then compose it with the previous transform (nnet-compose-transforms NEW PREV OUT)
    and apply it to the model's means (gmm-transform-means).

    \b
    Example:
      nnet-est-mllt exp/tri2/2.mat.new exp/tri2/2.1.macc exp/tri2/2.2.macc
    """
    total = None
    for path in accs:
        acc = mllt.MlltAccs.load(path)
        total = acc if total is None else total.add(acc, f"{path} (summed with {accs[0]})")
    result = total.update(log=logger)
    logdet = np.linalg.slogdet(result.matrix)[1]
    logger.info(f"Overall objective function improvement for MLLT is {result.objf_impr / result.count:.6g} "
                f"over {result.count:.8g} frames, logdet is {logdet:.6g}")
    matrix.write_matrix(matrix_out, result.matrix, binary)
