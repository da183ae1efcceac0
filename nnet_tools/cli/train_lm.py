import click

from nnet_tools.cli.common import program
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.corpus import transcripts
from nnet_tools.speech.lang import lm


@click.command()
@click.option("--order", default=3, show_default=True, help="N-gram order (1-5).")
@click.option("--lang", default=None, help="A lang dir: words not in its words.txt are mapped to its oov.txt word "
              "(with a warning), as Kaldi's sym2int.pl --map-oov maps them; that word is the unknown word.")
@click.option("--unk", default=None, help="The unknown word, given the unigram probability of unseen words. "
              "Default: --lang's oov.txt word, else none.")
@click.option("--utt-ids/--no-utt-ids", default=True, show_default=True,
              help="TEXT is a Kaldi text file ('utt w1 w2 ...'); with --no-utt-ids, one sentence a line.")
@click.argument("text")
@click.argument("arpa")
@program("nnet-train-lm")
def main(order, lang, unk, utt_ids, text, arpa):
    """Train a back-off Kneser-Ney n-gram LM on TEXT and write it as the ARPA file ARPA
    (kaldingram; as SRILM's ngram-count -ukndiscount -kn-modify-counts-at-end).

    \b
    Example:
      nnet-train-lm --order 3 --lang data/lang data/train/text data/local/lm/trigram.arpa
    """
    if utt_ids:
        refs = transcripts.read_text(text)
    else:
        from nnet_tools.data.textfile import records
        refs = {f"line-{n}": fields for n, fields, _ in records(text)}
    if lang is not None:
        refs, warning = transcripts.map_oovs(refs, lang, text)
        if warning:
            logger.warning(warning)
        if unk is None:
            unk = transcripts.read_symbols(lang)[1]
    if not refs:
        raise NnetError(f"{text}: no sentences")
    arpa_text, info = lm.train(list(refs.values()), order, unk)
    lm.write_arpa(arpa_text, arpa)
    counts = ", ".join(f"ngram {k}={v}" for k, v in sorted(info["ngrams"].items()))
    logger.info(f"Wrote {arpa}: {len(refs)} sentences, {counts}"
                + (f"; '{unk}' has unigram probability {info['unk_prob']:.4g}" if info["unk_prob"] else "") + ".")
