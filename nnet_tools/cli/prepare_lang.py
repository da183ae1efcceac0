import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.lang import langdir


@click.command()
@click.option("--sil-prob", default=0.5, show_default=True, help="Probability of optional silence after a word.")
@click.option("--silence-phone", default="SIL", show_default=True)
@click.option("--oov", default=None, help="The word OOVs map to (prepare_lang.sh's <oov-dict-entry>; oov.txt). "
              "Default: the word pronounced as the silence phone alone.")
@click.option("--word-loop-grammar/--no-word-loop-grammar", default=True, show_default=True,
              help="Also write G.fst: a loop over every word but silence, equal probabilities.")
@click.argument("lexicon")
@click.argument("lang_dir")
@program("nnet-prepare-lang")
def main(sil_prob, silence_phone, oov, word_loop_grammar, lexicon, lang_dir):
    """Make a Kaldi lang dir from LEXICON (Kaldi's utils/prepare_lang.sh, no word-position phones).

    \b
    Example:
      nnet-prepare-lang --sil-prob 0.5 data/local/dict/lexicon.txt data/lang
      nnet-prepare-lang --oov "<UNK>" data/local/dict/lexicon.txt data/lang
    """
    lang = langdir.prepare(lexicon, lang_dir, sil_prob, silence_phone, word_loop_grammar, oov)
    logger.info(f"Wrote {lang_dir}: {len(lang.nonsilence)} non-silence phones, {len(lang.silence)} silence, "
                f"{len(lang.words) - 4} words, {len(lang.disambig)} disambiguation symbols.")
