import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.corpus import datadir
from nnet_tools.speech.features import extract


@click.command()
@click.option("--type", "feat_type", type=click.Choice(["mfcc", "fbank"]), default="mfcc", show_default=True,
              help="compute-mfcc-feats or compute-fbank-feats.")
@click.option("--config", default=None, help="Kaldi-style conf file of --option=value lines.")
@click.option("--set", "overrides", multiple=True, metavar="--OPT=VALUE",
              help="One more option after the conf file, e.g. --set=--num-mel-bins=40.")
@click.option("--segments", default=None, help="Kaldi segments file ('utt reco start end [channel]', "
              "seconds): WAV_SCP lists recordings, and each segment is cut from its own (extract-segments).")
@click.argument("wav_scp")
@click.argument("feats_wspecifier")
@program("nnet-compute-feats")
def main(feat_type, config, overrides, segments, wav_scp, feats_wspecifier):
    """Compute MFCC or fbank features for every utterance of WAV_SCP (Kaldi's compute-*-feats).

    WAV_SCP is the file, scp:FILE, or '-' (stdin); its lines are 'utt file.wav' or, as in
    Kaldi, 'utt command |' (e.g. 'utt1 sox a.flac -t wav - |'). A missing or unreadable wav is
    skipped with a warning and counted; the program fails only when no utterance could be done,
    or on a wav whose sample rate is not --sample-frequency (a wrong conf file, or data dir).

    \b
    Examples:
      nnet-compute-feats --type mfcc --config conf/mfcc.conf data/train/wav.scp \\
          ark,scp:mfcc/raw_mfcc_train.1.ark,mfcc/raw_mfcc_train.1.scp
      nnet-compute-feats --segments data/train/segments data/train/wav.scp ark:mfcc/raw_mfcc_train.ark
    """
    opts, wave = extract.make_options(feat_type, config, overrides)
    cuts = None if segments is None else datadir.read_segments(segments)
    with tables.MatrixWriter(feats_wspecifier) as writer:
        done, failed = extract.compute_table(opts, wave, wav_scp, writer, logger, cuts)
        if done == 0:
            raise NnetError(f"{wav_scp}: no utterance could be processed ({failed} failed)")
    logger.info(f"Done {done} out of {done + failed} utterances.")
