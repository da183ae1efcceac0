import click

from nnet_tools.cli.common import program
from nnet_tools.data.textfile import table_file
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.corpus import transcripts
from nnet_tools.speech.search import score


@click.command()
@click.option("--mode", default="strict", show_default=True,
              help="strict: fail on a reference without a hypothesis; present: skip it; all: score it as empty.")
@click.option("--text", is_flag=True, help="Accepted for Kaldi's command lines: words are read as strings either way.")
@click.argument("ref_text")
@click.argument("hyp_text")
@program("nnet-compute-wer")
def main(mode, text, ref_text, hyp_text):
    """Print the word error rate of HYP_TEXT against REF_TEXT in Kaldi's compute-wer format.

    Each is a text file, ark:FILE, or '-' / 'ark:-' for stdin (one of them).

    \b
    Example:
      nnet-compute-wer --mode=present data/test/text exp/mono/decode_test/scoring/10.txt
      %WER 1.23 [ 12 / 975, 3 ins, 4 del, 5 sub ]
    """
    if table_file(ref_text, "text") == table_file(hyp_text, "text") == "-":
        raise NnetError(f"'{ref_text}' and '{hyp_text}' are both stdin: only one of them can be")
    refs, hyps = transcripts.read_text(ref_text), transcripts.read_text(hyp_text)
    try:
        counts, missing = score.compute_wer(refs, hyps, mode)
    except NnetError as e:
        raise NnetError(f"{hyp_text} against {ref_text}: {e}") from None
    print(counts.wer_line(partial=missing > 0))
    print(counts.ser_line())
    print(f"Scored {counts.sents} sentences, {missing} not present in hyp.")
    logger.info(f"Scored {counts.sents} sentences, {missing} not present in hyp.")
