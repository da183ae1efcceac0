import os

import click

from nnet_tools.cli.common import program
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import langdir


def _bool(value):
    if value is None or isinstance(value, bool):
        return value
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise click.BadParameter(f"expected true or false, got '{value}'")


@click.command()
@click.option("--sil-prob", default=0.5, show_default=True, help="Probability of optional silence after a word.")
@click.option("--position-dependent-phones", "position_dependent", default=None, metavar="true|false",
              help="Word-position-dependent phones _B _E _I _S (prepare_lang.sh's option). Default: true with a "
              "DICT_DIR, as Kaldi's; false with a bare LEXICON file.")
@click.option("--silence-phone", default="SIL", show_default=True, help="LEXICON form: the silence phone.")
@click.option("--oov", default=None, help="LEXICON form: the word OOVs map to (prepare_lang.sh's <oov-dict-entry>; "
              "oov.txt). Default: the word pronounced as the silence phone alone.")
@click.option("--word-loop-grammar/--no-word-loop-grammar", default=None,
              help="Also write G.fst: a loop over every word but !SIL, equal probabilities. Default: yes with a "
              "LEXICON, no with a DICT_DIR (Kaldi's G.fst comes from an LM: nnet-format-lm).")
@click.argument("source")
@click.argument("args", nargs=-1, metavar="[OOV_WORD [TMP_DIR]] LANG_DIR")
@program("nnet-prepare-lang")
def main(sil_prob, position_dependent, silence_phone, oov, word_loop_grammar, source, args):
    """Make a Kaldi lang dir (Kaldi's utils/prepare_lang.sh) from a dict dir or a bare lexicon.

    \b
    SOURCE is a Kaldi dict dir (lexicon.txt, silence_phones.txt, nonsilence_phones.txt,
    optional_silence.txt, extra_questions.txt), given with the OOV word and, as Kaldi's, perhaps
    a tmp dir for the intermediate files; or a lexicon.txt file, with one silence phone.
    \b
    Examples:
      nnet-prepare-lang data/local/dict "<UNK>" data/local/lang data/lang
      nnet-prepare-lang data/local/dict "<UNK>" data/lang
      nnet-prepare-lang --sil-prob 0.5 local/dict/lexicon.txt data/lang
      nnet-prepare-lang --position-dependent-phones true --oov "<UNK>" data/local/dict/lexicon.txt data/lang
    """
    position_dependent = _bool(position_dependent)
    if os.path.isdir(source):
        if len(args) not in (2, 3):
            raise NnetError(f"{source} is a dict dir: give DICT_DIR OOV_WORD [TMP_DIR] LANG_DIR "
                            f"(e.g. {source} '<UNK>' data/lang)")
        if oov is not None:
            raise NnetError("--oov is for the LEXICON form; with a dict dir the OOV word is the second argument")
        lang = langdir.prepare_dict(source, args[0], args[-1], args[1] if len(args) == 3 else None, sil_prob,
                                    True if position_dependent is None else position_dependent,
                                    bool(word_loop_grammar))
    else:
        if len(args) != 1:
            raise NnetError(f"{source} is not a directory: give LEXICON LANG_DIR (or a dict dir: DICT_DIR OOV_WORD "
                            f"[TMP_DIR] LANG_DIR)")
        lang = langdir.prepare(source, args[0], sil_prob, silence_phone,
                               True if word_loop_grammar is None else word_loop_grammar, oov,
                               bool(position_dependent))
    logger.info(f"Wrote {args[-1]}: {len(lang.nonsilence)} non-silence phones, {len(lang.silence)} silence, "
                f"{len(lang.words) - 4} words, {len(lang.disambig)} disambiguation symbols"
                + (", word-position-dependent phones." if lang.word_boundary else "."))
