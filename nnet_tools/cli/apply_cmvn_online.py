import click

from nnet_tools.data import tables
from nnet_tools.data.cmvn import read_spk2utt
from nnet_tools.data.finite import require_finite
from nnet_tools.data.online_cmvn import OnlineCmvnOptions, apply_online_cmvn, read_global_stats, speaker_state
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--spk2utt", default=None, help="spk2utt file: a speaker's earlier utterances back off the "
              "window before the global statistics do (utterances in its order).")
@click.option("--cmn-window", type=int, default=600, help="Frames of sliding context for the mean.")
@click.option("--speaker-frames", type=int, default=600, help="Frames of the speaker's earlier utterances used "
              "while the window is short.")
@click.option("--global-frames", type=int, default=200, help="Frames of the global statistics used while the "
              "window is still short.")
@click.option("--norm-means", type=bool, default=True, help="Subtract the mean (false: copy unchanged).")
@click.option("--norm-vars", type=bool, default=False, help="Also scale to unit variance.")
@click.argument("global_stats")
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-apply-cmvn-online")
def main(global_stats, feats_rspecifier, feats_wspecifier, spk2utt, **options):
    """Apply online CMVN to features (Kaldi's apply-cmvn-online): each frame normalised by the
    statistics of the frames up to it in a sliding window, backed off at the start by
    GLOBAL_STATS (a [2, dim+1] CMVN matrix, e.g. nnet-compute-cmvn-stats over the training
    features). The same computation as Kaldi's online2 decoders'.

    \b
    Example:
      nnet-compute-cmvn-stats scp:data/train/feats.scp exp/egs/global_cmvn.stats
      nnet-apply-cmvn-online exp/egs/global_cmvn.stats scp:data/test/feats.scp ark:- | nnet-compute ...
    """
    opts = OnlineCmvnOptions(**options)
    opts.check()
    stats = read_global_stats(global_stats)
    done = frames = 0
    with tables.MatrixWriter(feats_wspecifier) as writer:
        for utt, feats, history in _utterances(feats_rspecifier, spk2utt):
            # a NaN would spoil the speaker's later frames too, through the window
            require_finite(feats, f"{feats_rspecifier}: utterance '{utt}'")
            normalised = apply_online_cmvn(feats, stats, opts, history.get("stats"),
                                           where=f"{feats_rspecifier}: utterance '{utt}'")
            history["stats"] = speaker_state(history.get("stats"), feats)
            writer.write(utt, normalised)
            done, frames = done + 1, frames + len(feats)
        logger.info(f"Applied online CMVN to {done} files, or {frames} frames.")
        if not done:
            raise NnetError(f"{feats_rspecifier}: no features read")


def _utterances(feats_rspecifier, spk2utt):
    """(utterance, features, its speaker's history dict), in spk2utt's order when given."""
    if spk2utt is None:
        for utt, feats in tables.read_matrices(feats_rspecifier):
            yield utt, feats, {}
        return
    with tables.RandomAccessMatrices(feats_rspecifier) as reader:
        for utts in read_spk2utt(spk2utt).values():
            history = {}
            for utt in utts:
                if utt not in reader:
                    logger.warning(f"No features for utterance {utt}")
                    continue
                yield utt, reader[utt], history
