import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.search import lattice_io, lattice_posteriors


@click.command()
@click.option("--acoustic-scale", default=1.0, show_default=True, help="Scaling factor for acoustic likelihoods.")
@click.option("--lm-scale", default=1.0, show_default=True, help='Scaling factor for "graph costs" (including LM costs).')
@click.argument("lats_rspecifier")
@click.argument("posts_wspecifier")
@program("nnet-lattice-to-post")
def main(acoustic_scale, lm_scale, lats_rspecifier, posts_wspecifier):
    """Do forward-backward and collect posteriors over lattices (Kaldi's lattice-to-post): per
    frame, the posterior of each transition-id, for nnet-gmm-est-fmllr --posteriors.

    \b
    Example:
      nnet-lattice-to-post --acoustic-scale 0.083333 "ark:gunzip -c exp/tri3/decode_test.si/lat.1.gz |" ark:1.post
    """
    if acoustic_scale == 0.0:
        raise NnetError("--acoustic-scale: do not use a zero acoustic scale (cannot be inverted)")
    done = failed = 0
    total_like = total_acoustic = total_frames = 0.0
    with tables.PosteriorWriter(posts_wspecifier) as writer:
        for key, lat in lattice_io.read_lattices(lats_rspecifier):
            result = lattice_posteriors.forward_backward(lat, acoustic_scale, lm_scale,
                                                         f"{lats_rspecifier}: key '{key}'")
            if result is None:
                logger.warning(f"Lattice for utterance {key} has no path to a final state; no posteriors")
                failed += 1
                continue
            writer.write(key, result.post)
            total_like += result.log_like
            total_acoustic += result.acoustic_like
            total_frames += len(result.post)
            done += 1
        frames = total_frames or 1.0
        logger.info(f"Overall average log-like/frame is {total_like / frames:.6g} over {total_frames:g} frames.  "
                    f"Average acoustic like/frame is {total_acoustic / frames:.6g}")
        logger.info(f"Done {done} lattices.")
        if not done:   # inside the writer: nothing is written
            raise NnetError(f"{lats_rspecifier}: no lattice gave posteriors ({failed} without a final state)")
