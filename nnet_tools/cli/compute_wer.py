import click

from nnet_tools.cli.common import program
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech import score, transcripts


@click.command()
@click.option("--mode", default="present", show_default=True,
              help="present: score utterances with a hypothesis; all: fail on a missing one; strict: both ways.")
@click.argument("ref_text")
@click.argument("hyp_text")
@program("nnet-compute-wer")
def main(mode, ref_text, hyp_text):
    """Print the word error rate of HYP_TEXT against REF_TEXT in Kaldi's compute-wer format.

    Each is a text file, ark:FILE, or '-' / 'ark:-' for stdin (one of them).

    \b
    Example:
      nnet-compute-wer data/test/text exp/mono/decode_test/scoring/10.txt
      %WER 1.23 [ 12 / 975, 3 ins, 4 del, 5 sub ]
    """
    refs, hyps = transcripts.read_text(ref_text), transcripts.read_text(hyp_text)
    try:
        counts, missing = score.compute_wer(refs, hyps, mode)
    except NnetError as e:
        raise NnetError(f"{hyp_text} against {ref_text}: {e}") from None
    print(counts.wer_line())
    print(counts.ser_line())
    print(f"Scored {counts.sents} sentences, {missing} not present in hyp.")
    logger.info(f"Scored {counts.sents} sentences, {missing} not present in hyp.")
