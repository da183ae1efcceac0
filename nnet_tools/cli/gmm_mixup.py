import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.models import estimate, gmm


@click.command()
@click.option("--mix-up", default=0, show_default=True, help="Increase the number of Gaussians to this in all.")
@click.option("--power", default=0.2, show_default=True, help="Allocate Gaussians to pdfs by occupancy ** power.")
@click.option("--perturb-factor", default=0.01, show_default=True)
@click.option("--min-count", default=20.0, show_default=True, help="Split no Gaussian below this occupancy.")
@click.argument("model_in")
@click.argument("occs")
@click.argument("model_out")
@program("nnet-gmm-mixup")
def main(mix_up, power, perturb_factor, min_count, model_in, occs, model_out):
    """Split Gaussians to --mix-up in all, by the pdfs' occupancies in OCCS (Kaldi's gmm-mixup;
    OCCS as nnet-gmm-init-model --write-occs writes them).

    \b
    Example:
      nnet-gmm-mixup --mix-up 2000 exp/tri1/1.mdl exp/tri1/1.occs exp/tri1/1.mdl
    """
    mdl = gmm.load(model_in)
    occ = tables.read_vector(occs)
    if len(occ) != mdl.num_pdfs:
        raise NnetError(f"{occs}: {len(occ)} occupancies, but {model_in} has {mdl.num_pdfs} pdfs")
    if mix_up > mdl.am.num_gauss:
        estimate.split(mdl, occ, mix_up, power, perturb_factor, min_count, log=logger)
    gmm.save(mdl, model_out)
    logger.info(f"Wrote {model_out}: {mdl.num_pdfs} pdfs, {gmm.num_gauss(mdl)} Gaussians.")
