import sys
import time

import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import fstio
from nnet_tools.speech.lang.langdir import read_symbols
from nnet_tools.kaldi import gmm as kaldi_gmm
from nnet_tools.speech.search import lattice, lattice_io


@click.command()
@click.option("--acoustic-scale", default=0.1, show_default=True, help="Scaling factor for acoustic likelihoods.")
@click.option("--beam", default=16.0, show_default=True, help="Decoding beam (Kaldi's steps/decode.sh: 13).")
@click.option("--lattice-beam", default=10.0, show_default=True, help="Lattice generation beam (steps/decode.sh: 6).")
@click.option("--prune-interval", default=25, show_default=True, help="Interval (frames) at which to prune tokens.")
@click.option("--determinize-lattice", type=bool, default=True, show_default=True,
              help="Determinize the lattice (false: the raw lattice, pruned, one transition-id per arc).")
@click.option("--allow-partial", type=bool, default=False, show_default=True,
              help="Produce output even if no final state was reached.")
@click.option("--word-symbol-table", default=None, help="Symbol table for words (prints each best path to stderr).")
@click.argument("trans_model")
@click.argument("hclg")
@click.argument("loglikes_rspecifier")
@click.argument("lattice_wspecifier")
@click.argument("words_wspecifier", required=False)
@click.argument("alignments_wspecifier", required=False)
@program("nnet-latgen-faster-mapped")
def main(acoustic_scale, beam, lattice_beam, prune_interval, determinize_lattice, allow_partial, word_symbol_table,
         trans_model, hclg, loglikes_rspecifier, lattice_wspecifier, words_wspecifier, alignments_wspecifier):
    """Generate lattices from (frames x pdfs) log-likelihoods with HCLG (Kaldi's latgen-faster-mapped).

    TRANS_MODEL (a GMM model file, ours or Kaldi's) maps the graph's transition-ids to pdf-ids.
    Lattices are written as Kaldi's text CompactLattices with unscaled acoustic costs; the
    decoder's best path goes to WORDS_WSPECIFIER (word-ids) and ALIGNMENTS_WSPECIFIER.

    \b
    Example:
      nnet-compute exp/nnet/final.mdl scp:data/test/feats.scp ark:- | \\
        nnet-latgen-faster-mapped --beam 13 --lattice-beam 6 --allow-partial true exp/mono/final.mdl \\
        exp/mono/graph/HCLG.fst ark:- "ark:| gzip -c > exp/nnet/decode_test/lat.1.gz" ark,t:words.1.txt
    """
    symbols = None
    if word_symbol_table:
        symbols = {i: w for w, i in read_symbols(word_symbol_table).items()}
    decoder = lattice.LatticeDecoder(fstio.read_fst(hclg), kaldi_gmm.load_tid2pdf(trans_model), acoustic_scale,
                                     beam, lattice_beam, prune_interval, determinize_lattice,
                                     where=f"{hclg} with {trans_model}")
    started = time.perf_counter()
    done = failed = frames = 0
    total_like = 0.0
    words_writer = tables.IntVectorWriter(words_wspecifier) if words_wspecifier else None
    ali_writer = tables.IntVectorWriter(alignments_wspecifier) if alignments_wspecifier else None
    try:
        with lattice_io.LatticeWriter(lattice_wspecifier) as lat_writer:
            for utt, loglikes in tables.read_matrices(loglikes_rspecifier):
                if len(loglikes) == 0:
                    logger.warning(f"Zero-length utterance: {utt}")
                    failed += 1
                    continue
                out = decoder.decode(loglikes, f"{loglikes_rspecifier}: utt '{utt}'")
                if out is None:
                    logger.warning(f"Failed to decode utterance with id {utt}")
                    failed += 1
                    continue
                if not out.reached_final:
                    if not allow_partial:
                        logger.warning(f"Not producing output for utterance {utt} since no final-state reached "
                                       f"and --allow-partial=false.")
                        failed += 1
                        continue
                    logger.warning(f"Outputting partial output for utterance {utt} since no final-state reached")
                if symbols is not None:
                    missing = [w for w in out.words if w not in symbols]
                    if missing:
                        raise NnetError(f"{word_symbol_table}: word-id {missing[0]} not in the symbol table "
                                        f"(utterance '{utt}')")
                    print(" ".join([utt] + [symbols[w] for w in out.words]), file=sys.stderr, flush=True)
                if words_writer:
                    words_writer.write(utt, out.words)
                if ali_writer:
                    ali_writer.write(utt, out.tids)
                if out.det_beam < lattice_beam:
                    logger.warning(f"Determinization finished earlier than the beam for utterance {utt} "
                                   f"(beam {out.det_beam:.3g})")
                lat_writer.write(utt, out.lattice)
                num_frames = len(out.tids)
                logger.info(f"Log-like per frame for utterance {utt} is {-out.cost / num_frames:.6g} over "
                            f"{num_frames} frames.")
                total_like -= out.cost
                frames += num_frames
                done += 1
            elapsed = time.perf_counter() - started
            if frames:
                logger.info(f"Time taken {elapsed:.6g}s: real-time factor assuming 100 frames/sec is "
                            f"{elapsed * 100.0 / frames:.6g}")
            logger.info(f"Done {done} utterances, failed for {failed}")
            if frames:
                logger.info(f"Overall log-likelihood per frame is {total_like / frames:.6g} over {frames} frames.")
            if not done:  # Kaldi exits 1 too; no empty output for scoring to take as a perfect score
                raise NnetError(f"{loglikes_rspecifier}: no utterance decoded ({failed} failed)")
        for writer in (words_writer, ali_writer):
            if writer:
                writer.close()
    except BaseException:
        for writer in (words_writer, ali_writer):
            if writer:
                writer.abort()
        raise
