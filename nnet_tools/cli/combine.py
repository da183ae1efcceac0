import click

from nnet_tools.train import combine
from nnet_tools import device, heap
from nnet_tools.data import egs
from nnet_tools.model import model_io
from nnet_tools.log import logger
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--max-objective-evaluations", type=int, default=30)
@click.option("--use-gpu", default="optional", help="yes|wait (a CUDA GPU or fail), optional (the GPU if any, else CPU), no.")
@click.argument("args", nargs=-1, required=True)
@program("nnet-combine")
def main(args, max_objective_evaluations, use_gpu):
    """Combine the newest models into the best uniform average on combine egs.

    MODEL1 ... MODELN COMBINE_EGS MODEL_OUT, models newest first (Kaldi's nnet3-combine).
    Streams: memory is the running average and pieces of one input model, whatever N.

    \b
    Example:
      nnet-combine exp/nnet/40.mdl exp/nnet/39.mdl exp/nnet/38.mdl exp/nnet/egs/combine.egs exp/nnet/final.mdl
    """
    if len(args) < 3:
        raise click.UsageError("need at least one model, the combine egs and the output model")
    heap.return_freed_memory()   # the peak memory of many large models matters here, not speed
    *paths, egs_path, out = args
    blob = model_io.read(paths[0], mmap=True)
    windows, labels = egs.EgsArchive(egs_path).all_frames(model_io.build(blob, paths[0]))  # the model's context
    priors = blob.get("priors")
    del blob   # combine reads its models a piece at a time
    best, *_ = combine.combine(list(paths), windows, labels, max_objective_evaluations, device.select(use_gpu))
    model_io.save(best, out, priors=priors)
    logger.info(f"Wrote combined model to {out}")
