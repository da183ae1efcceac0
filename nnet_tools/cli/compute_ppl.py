import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.corpus import transcripts
from nnet_tools.speech.lang import lm


@click.command()
@click.option("--unk", default="<UNK>", show_default=True,
              help="Words the LM lacks score as this word, when the LM has it (otherwise their sentences are "
              "zeroprobs, left out).")
@click.option("--utt-ids/--no-utt-ids", default=True, show_default=True,
              help="TEXT is a Kaldi text file ('utt w1 w2 ...'); with --no-utt-ids, one sentence a line.")
@click.argument("arpa")
@click.argument("text")
@program("nnet-compute-ppl")
def main(unk, utt_ids, arpa, text):
    """Print the perplexity of the ARPA LM on TEXT, as SRILM's ngram -ppl prints it (kaldingram).

    \b
    Example:
      nnet-compute-ppl data/local/lm/trigram.arpa data/test/text
      file data/test/text: 400 sentences, 2910 words, 53 OOVs
      0 zeroprobs, logprob= -3285.1 ppl= 10.45 ppl1= 14.58
    """
    if utt_ids:
        sentences = list(transcripts.read_text(text).values())
    else:
        from nnet_tools.data.textfile import records
        sentences = [fields for _, fields, _ in records(text)]
    s = lm.perplexity(arpa, sentences, unk)
    lines = [f"file {text}: {s['num_sentences']} sentences, {s['num_words']} words, {s['num_oov']} OOVs",
             f"{s['num_zeroprobs']} zeroprobs, logprob= {s['logprob']:.4f} ppl= {s['ppl']:.4f} ppl1= {s['ppl1']:.4f}"]
    print("\n".join(lines))
    for line in lines:
        logger.info(line)
