import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.kaldi import alignments, gmm as kaldi_gmm
from nnet_tools.log import logger


@click.command()
@click.argument("model")
@click.argument("ali_rspecifier")
@click.argument("pdf_wspecifier")
@program("nnet-ali-to-pdf")
def main(model, ali_rspecifier, pdf_wspecifier):
    """Map transition-id alignments to per-frame pdf-ids: the DNN's targets (Kaldi's ali-to-pdf).
    MODEL is our GMM model file or a Kaldi final.mdl (GMM or nnet3, binary or text: only its
    transition model is read), so a Kaldi exp/*_ali dir's alignments become targets.

    \b
    Examples:
      nnet-ali-to-pdf exp/mono_ali/final.mdl "ark:cat exp/mono_ali/ali.*.ark |" ark,scp:exp/mono_ali/pdf.ark,data/train/targets.scp
      nnet-ali-to-pdf kaldi/exp/tri3_ali/final.mdl "ark:gunzip -c kaldi/exp/tri3_ali/ali.*.gz |" ark:exp/tri3_ali/pdf.ark
    """
    tid2pdf = kaldi_gmm.load_tid2pdf(model)
    n = 0
    with tables.IntVectorWriter(pdf_wspecifier) as writer:
        for utt, ali in tables.read_int_vectors(ali_rspecifier):
            writer.write(utt, alignments.to_pdfs(tid2pdf, ali, f"{ali_rspecifier}: utt '{utt}'"))
            n += 1
    logger.info(f"Converted {n} alignments to pdf sequences.")
