import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.transforms import lda, matrix


@click.command()
@click.option("--dim", default=40, show_default=True, help="Dimension to project to with LDA.")
@click.option("--allow-large-dim", type=bool, default=False, show_default=True,
              help="If true, allow an LDA dimension larger than the number of classes.")
@click.option("--remove-offset", type=bool, default=False, show_default=True,
              help="If true, output an affine transform that makes the projected data mean equal to zero.")
@click.option("--within-class-factor", default=1.0, show_default=True,
              help="(Deprecated, as in Kaldi) scale dimension i by sqrt((f + d_i) / (1 + d_i)); 1.0 is plain LDA.")
@click.option("--write-full-matrix", default="", metavar="FILE",
              help="Write the full LDA matrix (no dimension reduction) to this location.")
@click.option("--binary", type=bool, default=True, show_default=True, help="Write matrices in binary mode.")
@click.argument("matrix_out")
@click.argument("accs", nargs=-1, required=True)
@program("nnet-est-lda")
def main(dim, allow_large_dim, remove_offset, within_class_factor, write_full_matrix, binary, matrix_out, accs):
    """Estimate an LDA transform using stats obtained with nnet-acc-lda (Kaldi's est-lda); the
    statistics of all ACCS are summed. MATRIX_OUT is a Kaldi matrix file (dim x feature-dim).

    \b
    Example:
      nnet-est-lda --write-full-matrix exp/tri2/full.mat --dim 40 exp/tri2/0.mat exp/tri2/lda.*.acc
    """
    total = None
    for path in accs:
        acc = lda.LdaEstimate.load(path)
        total = acc if total is None else total.add(acc, f"{path} (summed with {accs[0]})")
    m, full = total.estimate(dim, allow_large_dim, remove_offset, within_class_factor, log=logger)
    matrix.write_matrix(matrix_out, m, binary)
    if write_full_matrix:
        matrix.write_matrix(write_full_matrix, full, binary)
    also = f" and the full {full.shape[0]}x{full.shape[1]} one to {write_full_matrix}" if write_full_matrix else ""
    logger.info(f"Wrote the {m.shape[0]}x{m.shape[1]} LDA matrix to {matrix_out}{also}")
