import click

from nnet_tools.cli.common import program
from nnet_tools.data import cmvn
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.transforms import fmllr, matrix


@click.command()
@click.option("--b-is-affine", type=bool, default=False, show_default=True,
              help="If true, treat the last column of transform B as an offset term (only relevant if A is affine).")
@click.option("--binary", type=bool, default=True, show_default=True,
              help="Write in binary mode (only relevant if OUT is a file; a table's wspecifier says, e.g. ark,t:).")
@click.option("--utt2spk", default=None,
              help="utt2spk file: A is a table per utterance and B per speaker (both tables).")
@click.argument("a")
@click.argument("b")
@click.argument("out")
@program("nnet-compose-transforms")
def main(b_is_affine, binary, utt2spk, a, b, out):
    """Compose (affine or linear) feature transforms (Kaldi's compose-transforms): OUT = A B, so
    B is the transform that gets applied to the features first. A, B and OUT are Kaldi matrix
    files, or tables of them (per-speaker fMLLR transforms, as nnet-gmm-est-fmllr writes): when
    A or B is an rspecifier OUT must be a wspecifier, and each key of the table is composed
    (both tables: A's keys, looked up in B; a key B lacks is warned about and skipped).

    \b
    Examples (an MLLT on LDA features composed with that LDA; a new fMLLR on the current one):
      nnet-compose-transforms exp/tri2/2.mat.new exp/tri2/0.mat exp/tri2/2.mat
      nnet-compose-transforms --b-is-affine true ark:exp/tri3/tmp_trans.1 ark:exp/tri3/trans.1 \\
          ark:exp/tri3/composed_trans.1
    """
    if cmvn.is_table(a) or cmvn.is_table(b):
        fmllr.compose_tables(a, b, out, b_is_affine, utt2spk, log=logger)
        return
    if cmvn.is_table(out):
        raise NnetError(f"Formats of the input and output rspecifiers/rxfilenames do not match: {out} is a "
                        f"wspecifier, but {a} and {b} are matrix files")
    if utt2spk is not None:
        raise NnetError(f"--utt2spk={utt2spk} given, but {a} and {b} are global transforms, not tables")
    ma, mb = matrix.read_matrix(a), matrix.read_matrix(b)
    if not b_is_affine and ma.shape == mb.shape and ma.shape[1] == ma.shape[0] + 1:
        logger.warning("It looks like you are trying to compose two affine transforms, but you omitted "
                       "the --b-is-affine option.")
    try:
        c = matrix.compose(ma, mb, b_is_affine)
    except NnetError as e:
        raise NnetError(f"{a} x {b}: {e}") from None
    matrix.write_matrix(out, c, binary)
    logger.info(f"Wrote the {c.shape[0]}x{c.shape[1]} transform {out} = {a} ({ma.shape[0]}x{ma.shape[1]}) "
                f"x {b} ({mb.shape[0]}x{mb.shape[1]}).")
