import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import fstio
from nnet_tools.speech.models import gmm
from nnet_tools.speech.search import decode


@click.command()
@click.option("--acoustic-scale", default=0.1, show_default=True)
@click.option("--beam", default=16.0, show_default=True)
@click.option("--max-active", default=2147483647, show_default=True)
@click.option("--min-active", default=20, show_default=True)
@click.option("--allow-partial", type=bool, default=True, show_default=True,
              help="Output the best partial path when no final state was reached.")
@click.argument("trans_model")
@click.argument("hclg")
@click.argument("loglikes_rspecifier")
@click.argument("words_wspecifier")
@program("nnet-decode-faster-mapped")
def main(acoustic_scale, beam, max_active, min_active, allow_partial, trans_model, hclg, loglikes_rspecifier,
         words_wspecifier):
    """Decode (frames x pdfs) log-likelihoods with HCLG; write word-ids (decode-faster-mapped).

    TRANS_MODEL (a GMM model file) maps the graph's transition-ids to pdf-ids.

    \b
    Example:
      nnet-compute --priors ... exp/nnet/final.mdl scp:data/test/feats.scp ark:- | \\
        nnet-decode-faster-mapped exp/mono/final.mdl exp/mono/graph/HCLG.fst ark:- ark,t:exp/nnet/decode_test/words.1.txt
    """
    decoder = decode.Decoder(fstio.read_fst(hclg), gmm.load_tid2pdf(trans_model), acoustic_scale, beam,
                             max_active, min_active, where=f"{hclg} with {trans_model}")
    done = failed = partial = 0
    with tables.IntVectorWriter(words_wspecifier) as writer:
        for utt, loglikes in tables.read_matrices(loglikes_rspecifier):
            if len(loglikes) == 0:
                logger.warning(f"Zero-length utterance: {utt}")
                failed += 1
                continue
            out = decoder.decode(loglikes, f"{loglikes_rspecifier}: utt '{utt}'")
            if out is None or (not out[1] and not allow_partial):
                logger.warning(f"Did not successfully decode utterance {utt}, len = {len(loglikes)}")
                failed += 1
                continue
            if not out[1]:
                logger.warning(f"Decoder did not reach end-state, outputting partial traceback for {utt}")
                partial += 1
            writer.write(utt, out[0])
            done += 1
        logger.info(f"Done {done} utterances, failed for {failed}; {partial} partial.")
        if not done:  # Kaldi exits 1 too; no empty output for scoring to take as a perfect score
            raise NnetError(f"{loglikes_rspecifier}: no utterance decoded ({failed} failed)")
