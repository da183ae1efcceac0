import click

from nnet_tools.cli.common import program
from nnet_tools.kaldi import gmm as kaldi_gmm
from nnet_tools.log import logger
from nnet_tools.speech.models import gmm


@click.command()
@click.option("--binary", type=bool, default=True, show_default=True,
              help="Kaldi output: binary (true) or text (false), as gmm-copy --binary.")
@click.option("--format", "out_format", type=click.Choice(["kaldi", "npz"]), default=None,
              help="Output format: Kaldi's final.mdl or our .npz. Default: npz if MODEL_OUT's name ends "
                   "in .npz, else kaldi.")
@click.option("--write-tree", default=None, metavar="TREE",
              help="Also write the model's monophone tree there, as Kaldi's tree file (--binary applies).")
@click.argument("model_in")
@click.argument("model_out")
@program("nnet-gmm-copy")
def main(binary, out_format, write_tree, model_in, model_out):
    """Copy a GMM model between our .npz format and Kaldi's final.mdl (TransitionModel +
    AmDiagGmm), either way, or Kaldi binary <-> text (Kaldi's gmm-copy). MODEL_IN's format is
    recognised by its contents. A Kaldi model becomes ours only if it is a monophone model with
    one pdf per phone and HMM state (as gmm-init-mono makes): our format holds no tree.

    \b
    Examples:
      nnet-gmm-copy --write-tree exp/mono_kaldi/tree exp/mono/final.mdl exp/mono_kaldi/final.mdl
      nnet-gmm-copy --binary false kaldi/exp/mono/final.mdl final.txt.mdl
      nnet-gmm-copy kaldi/exp/mono/final.mdl exp/mono/final.npz
      nnet-gmm-copy --format npz kaldi/exp/mono/final.mdl exp/mono/final.mdl
    """
    model = kaldi_gmm.load(model_in)
    out_format = out_format or kaldi_gmm.suffix_format(model_out)
    if out_format == "npz" or write_tree:
        kaldi_gmm.check_monophone(model, model_in)
    if out_format == "npz":
        gmm.save(model, model_out)
    else:
        kaldi_gmm.write_model(model, model_out, binary)
    what = "our .npz format" if out_format == "npz" else f"Kaldi's {'binary' if binary else 'text'} format"
    logger.info(f"Wrote {model_out} in {what}: {model.num_pdfs} pdfs, feature dim {model.dim}, "
                f"{gmm.num_gauss(model)} Gaussians.")
    if write_tree:
        kaldi_gmm.write_tree(model, write_tree, binary)
        logger.info(f"Wrote the tree {write_tree}: {model.num_pdfs} leaves.")
