import math
import os

import click

from nnet_tools import device, heap
from nnet_tools.model import edits as edits_mod, model_io
from nnet_tools.train import job as train
from nnet_tools.data import egs as egs_mod
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--learning-rate", type=float, required=True, help="Actual learning rate of this job (x each layer's learning-rate-factor).")
@click.option("--chunk", type=bool, default=True, help="Train on every labelled frame of each eg in one pass over "
              "its chunk, as nnet3-train does; --minibatch-size counts egs. false: one label position "
              "per eg (nnet2's scheme, --frame).")
@click.option("--frame", type=int, default=0, help="With --chunk false: the label position of each eg to train on "
              "(nnet3-copy-egs --frame).")
@click.option("--minibatch-size", default="512", help="Kaldi minibatch rule, e.g. 512, 256,128 or 128=64/256=32.")
@click.option("--momentum", type=float, default=0.0)
@click.option("--max-param-change", type=float, default=2.0, help="Global per-minibatch limit on the parameter change.")
@click.option("--shuffle-buffer-size", type=int, default=5000, help="nnet3-shuffle-egs buffer; 0 = full shuffle.")
@click.option("--srand", type=int, default=0)
@click.option("--print-interval", type=int, default=10)
@click.option("--l2-regularize-factor", type=float, default=1.0,
              help="Multiplies each layer's l2-regularize (the driver passes 1/num-jobs).")
@click.option("--backstitch-training-scale", type=float, default=0.0, help="Backstitch alpha; 0 = off. Needs --momentum 0.")
@click.option("--backstitch-training-interval", type=int, default=1, help="Backstitch every n-th minibatch.")
@click.option("--zero-component-stats", type=bool, default=True,
              help="Zero the nonlinearities' activation and derivative statistics before training.")
@click.option("--store-component-stats", type=bool, default=True,
              help="Accumulate those statistics over this job's frames (nnet-info prints them).")
@click.option("--scale", type=float, default=1.0,
              help="Scale every parameter before training (nnet3-copy --scale; the proportional-shrink value).")
@click.option("--edits", default="",
              help="Model edits before training (nnet3-copy --edits), e.g. 'set-dropout-proportion name=* proportion=0.25'.")
@click.option("--num-threads", type=int, default=0, help="CPU threads for torch (0 = torch's default).")
@click.option("--use-gpu", default="optional", help="yes|wait (a CUDA GPU or fail), optional (the GPU if any, else CPU), no.")
@click.option("--job", type=click.IntRange(min=1), default=None,
              help="With an egs dir: this job's number (JOB, from 1) in the iteration.")
@click.option("--archives-processed", type=click.IntRange(min=0), default=0,
              help="With an egs dir: archives processed before this iteration.")
@click.option("--verbose", type=int, default=0)
@click.argument("model_in")
@click.argument("egs")
@click.argument("model_out")
@program("nnet-train-one-job")
def main(model_in, egs, model_out, num_threads, use_gpu, job, archives_processed, verbose, scale, edits, **opts):
    """Train one job of one iteration: MODEL_IN + one egs archive -> MODEL_OUT.

    EGS is an archive, or an egs dir with --job and --archives-processed, which pick the archive
    (and with --chunk false the label position) by Kaldi's rotation, so that a whole iteration is
    one array submission.

    \b
    Examples:
      nnet-train-one-job --learning-rate 0.0006 --chunk false --frame 3 --srand 7 \\
          exp/nnet/7.mdl exp/egs/egs.2.ark exp/nnet/8.1.mdl
      nnet-queue local JOB=1:4 exp/nnet/log/train.7.JOB.log nnet-train-one-job --learning-rate 0.0012 \\
          --srand 7 --job JOB --archives-processed 22 exp/nnet/7.mdl exp/egs exp/nnet/8.JOB.mdl
      nnet-train-one-job --learning-rate 0.0012 --l2-regularize-factor 0.25 --scale 0.94 \\
          --edits 'set-dropout-proportion name=* proportion=0.2' exp/nnet/7.mdl exp/egs/egs.1.ark exp/nnet/8.1.mdl
    """
    device.set_threads(num_threads)
    heap.keep_freed_memory()
    dev = device.select(use_gpu)
    if os.path.isdir(egs):
        if job is None:
            raise NnetError(f"{egs}: is an egs dir; give --job (and --archives-processed) or an archive file")
        egs, opts["frame"] = egs_mod.job_archive(egs, job, archives_processed)
        logger.info(f"Job {job}: training on {egs}, " + ("whole chunks" if opts["chunk"] else f"frame {opts['frame']}"))
    options = train.TrainOptions(**opts)
    options.check()
    if not 0 < scale < math.inf:
        raise NnetError(f"--scale must be finite and > 0, got {scale}")
    model, priors = model_io.load(model_in, with_priors=True)
    if scale != 1.0:
        logger.info(f"Scaling parameters by {scale:g}")
        edits_mod.scale_parameters(model, scale)
    if edits:
        edits_mod.apply_edits(model, edits)
    train.train_one_job(model, egs_mod.EgsArchive(egs), options, dev)
    model_io.save(model, model_out, priors=priors)
    logger.info(f"Wrote model to {model_out}")
