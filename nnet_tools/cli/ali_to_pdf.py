import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm


@click.command()
@click.argument("model")
@click.argument("ali_rspecifier")
@click.argument("pdf_wspecifier")
@program("nnet-ali-to-pdf")
def main(model, ali_rspecifier, pdf_wspecifier):
    """Map transition-id alignments to per-frame pdf-ids: the DNN's targets (Kaldi's ali-to-pdf).

    \b
    Example:
      nnet-ali-to-pdf exp/mono_ali/final.mdl "ark:cat exp/mono_ali/ali.*.ark |" ark,scp:exp/mono_ali/pdf.ark,data/train/targets.scp
    """
    tid2pdf = gmm.load_tid2pdf(model)
    n = 0
    with tables.IntVectorWriter(pdf_wspecifier) as writer:
        for utt, ali in tables.read_int_vectors(ali_rspecifier):
            gmm.check_tids(ali, len(tid2pdf) - 1, f"{ali_rspecifier}: utt '{utt}'")
            writer.write(utt, tid2pdf[ali])
            n += 1
    logger.info(f"Converted {n} alignments to pdf sequences.")
