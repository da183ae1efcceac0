import click

from nnet_tools.cli.common import program
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import espeak_dict


def _entry(text):
    fields = text.split()
    if len(fields) < 2:
        raise NnetError(f"--extra-word '{text}': expected 'WORD PHONE1 [PHONE2 ...]'")
    return fields[0], fields[1:]


@click.command()
@click.option("--voice", default="en", show_default=True, help="espeak-ng voice whose rules pronounce the words.")
@click.option("--extra-word", "extra", multiple=True, metavar="'WORD PHONES'",
              help="A word pronounced by hand, e.g. '<UNK> SPN' (repeatable). Default: '!SIL SIL' and '<UNK> SPN'; "
              "SIL and SPN are the silence phones.")
@click.option("--sentences", default=None, metavar="TEXT",
              help="A Kaldi text file (utt-id word1 word2 ...), e.g. data/train/text: add each word's pronunciations "
              "as espeak-ng says them in these sentences (weak forms: 'a' a#, 'to' t @) besides the isolated one.")
@click.option("--min-count", default=espeak_dict.MIN_COUNT, show_default=True,
              help="With --sentences: add an in-context pronunciation seen at least this many times.")
@click.argument("words")
@click.argument("dict_dir")
@program("nnet-prepare-dict")
def main(voice, extra, sentences, min_count, words, dict_dir):
    """Make a Kaldi dict dir (lexicon.txt, silence_phones.txt, nonsilence_phones.txt,
    optional_silence.txt, extra_questions.txt) for the words of WORDS (one a line, or the first
    field of each line) with espeak-ng's pronunciations, stress marks stripped.

    \b
    Example:
      nnet-prepare-dict data/local/vocab.txt data/local/dict
      nnet-prepare-dict --voice en-us --extra-word '!SIL SIL' --extra-word '<UNK> SPN' words.txt dict
      nnet-prepare-dict --sentences data/train/text data/local/vocab.txt data/local/dict
    """
    entries = [_entry(e) for e in extra] if extra else [("!SIL", ["SIL"]), ("<UNK>", ["SPN"])]
    context = espeak_dict.InContext(espeak_dict.read_sentences(sentences), min_count) if sentences else None
    d = espeak_dict.make_dict(espeak_dict.read_words(words), voice, entries, dict_dir, context)
    d.write()
    for line in context.summary() if context else ():
        logger.info(line)
    logger.info(f"Wrote {dict_dir}: {len(d.lexicon)} pronunciations of {len({w for w, _ in d.lexicon})} words, "
                f"{len(d.nonsilence)} non-silence phones, {sum(len(line) for line in d.silence)} silence phones "
                f"({voice} pronunciations from espeak-ng).")
