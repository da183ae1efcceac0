import click

from nnet_tools.data import tables
from nnet_tools.model import priors
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--counts-dim", type=int, default=None, help="Length of the vector (the number of pdfs); "
              "default: the largest pdf-id + 1.")
@click.option("--normalize", type=bool, default=True,
              help="Write priors (counts scaled to sum to 1, floored at 1e-15); false: raw counts.")
@click.option("--binary", type=bool, default=False, help="Write a binary Kaldi vector (else text '[ ... ]').")
@click.argument("targets_rspecifier")
@click.argument("out_vector")
@program("nnet-sum-pdf-counts")
def main(targets_rspecifier, out_vector, counts_dim, normalize, binary):
    """Count the pdf-ids of a targets/alignment table into a Kaldi vector: class priors for
    nnet-adjust-priors (Kaldi's analyze-counts).

    \b
    Example:
      nnet-sum-pdf-counts --counts-dim 1936 "ark:ali-to-pdf exp/tri3_ali/final.mdl 'ark:gunzip -c exp/tri3_ali/ali.*.gz |' ark:- |" exp/nnet/priors.vec
      nnet-adjust-priors exp/nnet/final.mdl exp/nnet/priors.vec exp/nnet/final.mdl
    """
    if counts_dim is not None and counts_dim < 1:
        raise click.UsageError("--counts-dim must be at least 1")
    counts = priors.count_pdfs(targets_rspecifier, counts_dim)
    unseen = int((counts == 0).sum())
    logger.info(f"Counted {int(counts.sum())} frames over {len(counts)} pdfs; {unseen} pdfs never seen"
                + (" (their priors are floored)" if unseen and normalize else ""))
    tables.write_vector(out_vector, priors.normalise(counts, where=targets_rspecifier) if normalize else counts,
                        binary=binary)
    logger.info(f"Wrote {'priors' if normalize else 'counts'} to {out_vector}")
