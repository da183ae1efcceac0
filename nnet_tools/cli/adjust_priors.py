import click

from nnet_tools.model import priors
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--prior-floor", type=float, default=priors.PRIOR_FLOOR, help="Floor on each prior.")
@click.argument("model_in")
@click.argument("priors_vector")
@click.argument("model_out")
@program("nnet-adjust-priors")
def main(model_in, priors_vector, model_out, prior_floor):
    """Store class priors in a model (Kaldi's nnet3-am-adjust-priors): PRIORS_VECTOR is a Kaldi
    vector (binary or text) of counts, summed posteriors or priors; it is renormalised to sum
    to 1 and floored. nnet-compute then writes log-likelihoods = log-posterior - log-prior.

    \b
    Example:
      nnet-adjust-priors exp/nnet/final.mdl exp/nnet/priors.vec exp/nnet/final.mdl
    """
    priors.adjust_model_priors(model_in, priors_vector, model_out, prior_floor)
