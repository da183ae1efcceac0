import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.models import estimate, gmm


@click.command()
@click.option("--mix-up", default=0, show_default=True, help="Increase the number of Gaussians to this in all.")
@click.option("--power", default=0.2, show_default=True, help="Allocate Gaussians to pdfs by occupancy ** power.")
@click.option("--min-gaussian-occupancy", default=10.0, show_default=True)
@click.option("--perturb-factor", default=0.01, show_default=True,
              help="While mixing up, move the split Gaussians apart by this x their standard deviation.")
@click.option("--remove-low-count-gaussians", type=bool, default=True, show_default=True,
              help="Remove Gaussians whose occupancy is under --min-gaussian-occupancy (false: keep them as they "
                   "were, so the output matches the input Gaussian for Gaussian).")
@click.option("--srand", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of that perturbation.")
@click.argument("model_in")
@click.argument("accs", nargs=-1, required=True)
@click.argument("model_out")
@program("nnet-gmm-est")
def main(mix_up, power, min_gaussian_occupancy, perturb_factor, remove_low_count_gaussians, srand, model_in, accs,
         model_out):
    """Sum accumulators and re-estimate the GMM and transitions (gmm-sum-accs + gmm-est).

    \b
    Example:
      nnet-gmm-est --mix-up 300 --power 0.25 exp/mono/4.mdl exp/mono/4.1.acc exp/mono/4.2.acc exp/mono/5.mdl
    """
    mdl = gmm.load(model_in)
    total = None
    for path in accs:
        acc = estimate.Stats.load(path)
        acc.check_model(mdl, path)
        total = acc if total is None else total.add(acc)
    estimate.estimate(mdl, total, mix_up, power, min_gaussian_occupancy, perturb_factor, srand=srand, log=logger,
                      remove_low_count_gaussians=remove_low_count_gaussians)
    gmm.save(mdl, model_out)
    logger.info(f"Wrote {model_out}: {mdl.num_pdfs} pdfs, {gmm.num_gauss(mdl)} Gaussians.")
