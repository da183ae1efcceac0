import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.corpus import transcripts
from nnet_tools.speech.lang import fstio, langdir
from nnet_tools.speech.models import align, gmm


@click.command()
@click.option("--equal", is_flag=True, help="Flat start: equally spaced random alignment (align-equal-compiled).")
@click.option("--beam", default=6.0, show_default=True)
@click.option("--retry-beam", default=40.0, show_default=True)
@click.option("--careful", type=bool, default=False, show_default=True)
@click.option("--acoustic-scale", default=0.1, show_default=True)
@click.option("--transition-scale", default=1.0, show_default=True)
@click.option("--self-loop-scale", default=0.1, show_default=True)
@click.option("--rand-seed", default=3, show_default=True, help="For --equal.")
@click.argument("model")
@click.argument("lang_dir")
@click.argument("feats_rspecifier")
@click.argument("text")
@click.argument("ali_wspecifier")
@program("nnet-gmm-align")
def main(equal, beam, retry_beam, careful, acoustic_scale, transition_scale, self_loop_scale, rand_seed,
         model, lang_dir, feats_rspecifier, text, ali_wspecifier):
    """Align utterances to their transcripts (compile-train-graphs + gmm-align-compiled, or
    align-equal-compiled with --equal). Failures are counted and reported, as Kaldi's are.
    Words not in LANG_DIR/words.txt are mapped to LANG_DIR/oov.txt's word and counted (Kaldi's
    sym2int.pl --map-oov); a word there only in another case ('ONE' for 'one') is an error.
    TEXT is the transcripts file, ark:FILE, or '-' / 'ark:-' for stdin.

    \b
    Example:
      nnet-gmm-align exp/mono/4.mdl data/lang ark:exp/mono/feats.1.ark data/train/split2/1/text ark:exp/mono/ali.1.ark
    """
    mdl = gmm.load(model)
    lng = langdir.load(lang_dir)
    compiler = align.GraphCompiler(mdl, lng, fstio.read_fst(f"{lang_dir}/L.fst"), f"{model} with {lang_dir}")
    # As Kaldi's steps do with sym2int.pl --map-oov: OOV words become the lang dir's oov.txt word.
    refs, oov_line = transcripts.map_oovs(transcripts.read_text(text), lang_dir, text)
    if oov_line:
        logger.warning(oov_line)
    aligner = align.Aligner(mdl, beam, retry_beam, careful, acoustic_scale, transition_scale, self_loop_scale)
    done = failed = 0
    with tables.IntVectorWriter(ali_wspecifier) as writer:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            if not gmm.usable_features(feats, mdl.dim, f"{feats_rspecifier}: utt '{utt}'"):
                failed += 1
                continue
            if utt not in refs:
                logger.warning(f"No transcript for utterance {utt} in {text}")
                failed += 1
                continue
            try:
                graph = compiler.compile(refs[utt], f"{text}: utt '{utt}'")
            except NnetError as e:
                logger.warning(f"{e}; not aligning it")
                failed += 1
                continue
            ali = align.align_equal(graph, len(feats), rand_seed) if equal else aligner.align(utt, graph, feats)
            if ali is None:
                logger.warning(f"Did not successfully align utterance {utt}, len = {len(feats)}"
                               + (" (too short for its transcript?)" if equal else ""))
                failed += 1
                continue
            writer.write(utt, ali)
            done += 1
        if done == 0:
            raise NnetError(f"{feats_rspecifier}: no utterance was aligned ({failed} failed)")
    if not equal and aligner.frames:
        logger.info(f"Overall log-likelihood per frame is {aligner.tot_like / aligner.frames:.6g} over "
                    f"{aligner.frames} frames.")
        logger.info(f"Retried {aligner.retried} out of {aligner.done + aligner.failed} utterances.")
    logger.info(f"Done {done}, errors on {failed}")
