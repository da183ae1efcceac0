import contextlib

import click

from nnet_tools.data import cmvn as cmvn_mod
from nnet_tools.data.get_egs import EgsOptions, dump_job, get_egs
from nnet_tools.cli.common import cmvn_options, program


@click.command(context_settings={"show_default": True})
@click.option("--frames-per-eg", type=int, default=8, help="Consecutive labelled frames per eg.")
@click.option("--left-context", type=int, default=4, help="Input frames before the first labelled frame (the model's).")
@click.option("--right-context", type=int, default=4, help="Input frames after the last labelled frame (the model's).")
@click.option("--samples-per-iter", type=int, default=400000, help="Target egs per archive; sets the archive count.")
@click.option("--num-utts-subset", type=int, default=300, help="Utterances in valid_uttlist and in train_subset_uttlist.")
@click.option("--num-frames-diagnostic", type=int, default=10000, help="Frames in valid_/train_diagnostic.egs.")
@click.option("--num-train-frames-combine", type=int, default=60000, help="Train-subset frames in combine.egs.")
@click.option("--num-valid-frames-combine", type=int, default=0, help="Valid frames in combine.egs.")
@click.option("--srand", type=int, default=0, help="Seed for utterance lists, scattering and shuffling.")
@click.option("--num-targets", type=int, default=None, help="Number of classes; a target id >= it is an error. "
              "Default: largest id + 1.")
@click.option("--targets-length-tolerance", type=int, default=2,
              help="Allowed difference between target and feature frame counts (nnet3-get-egs).")
@click.option("--allow-nonfinite", is_flag=True, default=False,
              help="Skip (with a warning and a count) utterances with NaN or infinite features; "
              "without it they are an error.")
@click.option("--compress", type=bool, default=False,
              help="Store inputs compressed, 2 bytes a value (Kaldi's CompressedMatrix kTwoByte, one header per eg).")
@click.option("--num-jobs", type=int, default=1, help="With --job: this is one of N dump jobs (get_egs.sh --nj).")
@click.option("--job", type=int, default=None, help="Job number 1..N: write this job's pieces of every archive to "
              "EGS_DIR/orig; nnet-merge-egs then merges and shuffles them.")
@click.option("--lock", type=bool, default=True, help="One-process form: hold EGS_DIR/get_egs.lock while writing "
              "(a second writer is refused); false when the caller holds it (steps/get_egs.sh).")
@click.option("--verbose", type=int, default=0)
@cmvn_options
@click.argument("feats_rspecifier")
@click.argument("targets_rspecifier")
@click.argument("egs_dir")
@program("nnet-get-egs")
def main(feats_rspecifier, targets_rspecifier, egs_dir, verbose, cmvn, utt2spk, online_cmvn, cmvn_opts, num_jobs,
         job, lock, **opts):
    """Features + per-frame targets -> shuffled egs archives, diagnostic and combine egs, info/
    (Kaldi's steps/nnet3/get_egs.sh). Targets are an int32-vector table of class ids, one per frame;
    a one-frame utterance with one target is an image or utterance label (use --frames-per-eg 1).
    Targets are read twice (counted, then looked up by key), so not from stdin; with features in
    sorted key order, 'ark,s,cs:targets.ark' keeps only the current target entry in memory.

    With --cmvn (and --utt2spk) the features are first normalised as Kaldi's get_egs.sh does
    through apply-cmvn (means only by default); cmvn_opts records what was applied. With
    --online-cmvn GLOBAL_STATS they get online CMVN instead, each utterance on its own (as an online
    decoder meets it); steps/get_egs.sh --online-cmvn true then marks the dir (EGS_DIR/online_cmvn).

    With --num-jobs N --job J it is one of N parallel jobs, each given a split of the features
    (the targets whole): it writes its pieces of every archive to EGS_DIR/orig; then
    'nnet-merge-egs EGS_DIR K' per archive and 'nnet-merge-egs --finish EGS_DIR' complete the dir
    (steps/get_egs.sh --nj N does all three).

    \b
    Example:
      nnet-get-egs --frames-per-eg 8 --left-context 5 --right-context 5 --num-targets 10 \\
          --cmvn scp:data/train/cmvn.scp --utt2spk data/train/utt2spk \\
          scp:data/train/feats.scp ark:data/train/targets.ark exp/nnet/egs
    """
    options = EgsOptions(**opts)
    with cmvn_mod.applier_for(cmvn, utt2spk, cmvn_opts, online_cmvn) or contextlib.nullcontext() as applier:
        if job is None:
            if num_jobs != 1:
                raise click.UsageError("--num-jobs needs --job")
            get_egs(feats_rspecifier, targets_rspecifier, egs_dir, options, applier, lock)
        else:
            dump_job(feats_rspecifier, targets_rspecifier, egs_dir, options, job, num_jobs, applier)
