"""utils/validate_data_dir.sh runs this program (python3 -m nnet_tools.cli.validate_data_dir)."""
import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.corpus import datadir


@click.command()
@click.option("--no-feats", is_flag=True, help="Do not require feats.scp (before feature extraction).")
@click.option("--no-text", is_flag=True, help="Do not require text (e.g. unlabelled data).")
@click.option("--no-wav", is_flag=True, help="Do not require wav.scp.")
@click.option("--lang", default=None, help="A lang dir (or graph dir: words.txt, perhaps oov.txt): count the "
              "text's words not in its words.txt; refuse words that are there only in another case.")
@click.argument("data_dir")
@program("validate_data_dir.sh")
def main(no_feats, no_text, no_wav, lang, data_dir):
    """Check a Kaldi data dir as Kaldi's utils/validate_data_dir.sh does: utt2spk and spk2utt
    (sorted, each key once, one the inverse of the other, utt2spk sorted on speakers too), and
    the keys of text, wav.scp (or segments and the recordings of wav.scp), feats.scp, cmvn.scp.
    The first fault is one line naming the file, the key and the fix; exit status 1.

    \b
    Examples:
      utils/validate_data_dir.sh --no-feats data/train
      utils/validate_data_dir.sh --lang data/lang data/train
    """
    utts, speakers, warnings = datadir.validate(data_dir, no_feats, no_text, no_wav, lang)
    for line in warnings:
        logger.warning(line)
    print(f"validate_data_dir.sh: Successfully validated data-directory {data_dir} "
          f"({utts} utterances, {speakers} speakers)")


if __name__ == "__main__":
    main()
