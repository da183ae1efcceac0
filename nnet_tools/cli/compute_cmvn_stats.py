import click

from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--spk2utt", default=None, help="spk2utt file: accumulate statistics per speaker, keyed by speaker.")
@click.option("--binary", type=bool, default=True, help="Write binary (true) or text (false) matrices.")
@click.argument("feats_rspecifier")
@click.argument("stats_wspecifier")
@program("nnet-compute-cmvn-stats")
def main(feats_rspecifier, stats_wspecifier, spk2utt, binary):
    """Compute CMVN statistics, per utterance or per speaker (Kaldi's compute-cmvn-stats):
    [2, dim+1] double matrices, row 0 the sums and the frame count, row 1 the sums of squares.
    A file name, not a table, as output gets one matrix: the global statistics.

    \b
    Example:
      nnet-compute-cmvn-stats --spk2utt=data/train/spk2utt scp:data/train/feats.scp \\
          ark,scp:data/train/cmvn.ark,data/train/cmvn.scp
      nnet-compute-cmvn-stats scp:data/train/feats.scp exp/global_cmvn.stats
    """
    if not cmvn.is_table(stats_wspecifier):
        _write_global(feats_rspecifier, stats_wspecifier, spk2utt, binary)
        return
    if not binary:
        options, _, target = stats_wspecifier.partition(":")
        stats_wspecifier = f"{options},t:{target}"
    counts = {}
    with tables.DoubleMatrixWriter(stats_wspecifier) as writer:
        for key, stats in cmvn.speaker_stats(feats_rspecifier, spk2utt, counts):
            writer.write(key, stats)
        # Kaldi exits 1 when nothing was done; the writer's exit then discards the empty output.
        _check_done(feats_rspecifier, spk2utt, counts)


def _write_global(feats_rspecifier, out, spk2utt, binary):
    if spk2utt is not None:
        raise NnetError(f"--spk2utt is not compatible with a file as output, '{out}' (did you forget ark:?)")
    counts = {}
    total = cmvn.global_stats(feats_rspecifier, counts)
    _check_done(feats_rspecifier, spk2utt, counts)
    tables.write_double_matrix(out, total, binary)
    logger.info(f"Wrote global CMVN stats to {out}")


def _check_done(feats_rspecifier, spk2utt, counts):
    logger.info(f"Done accumulating CMVN stats for {counts['done']} utterances; {counts['errors']} had errors.")
    if not counts["done"]:
        reason = (f"none of the {counts['errors']} utterances in {spk2utt} has features there"
                  if counts["errors"] else "no features read")
        raise NnetError(f"{feats_rspecifier}: no statistics computed: {reason}")
