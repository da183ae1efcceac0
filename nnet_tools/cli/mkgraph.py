import math
import os

import click

from nnet_tools import fileio
from nnet_tools.cli.common import program
from nnet_tools.data import textfile
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import fstio, langdir
from nnet_tools.speech.models import gmm
from nnet_tools.speech.search import graph


@click.command()
@click.option("--transition-scale", default=1.0, show_default=True)
@click.option("--self-loop-scale", default=0.1, show_default=True)
@click.argument("lang_dir")
@click.argument("model")
@click.argument("graph_dir")
@program("nnet-mkgraph")
def main(transition_scale, self_loop_scale, lang_dir, model, graph_dir):
    """Compile HCLG.fst from LANG_DIR's L_disambig.fst and G.fst and a model (utils/mkgraph.sh).

    \b
    Example:
      nnet-mkgraph data/lang exp/mono/final.mdl exp/mono/graph
    """
    for name, value in (("--transition-scale", transition_scale), ("--self-loop-scale", self_loop_scale)):
        if not 0.0 <= value < math.inf:
            raise NnetError(f"{name} must be finite and >= 0, got {value}")
    if os.path.realpath(graph_dir) == os.path.realpath(lang_dir):
        raise NnetError(f"{graph_dir}: the graph dir must not be the lang dir")
    lng = langdir.load(lang_dir)
    mdl = gmm.load(model)
    mdl.check_lang(lng, f"{model} with {lang_dir}")
    try:
        hclg = graph.make_hclg(lng, mdl, fstio.read_fst(f"{lang_dir}/L_disambig.fst"),
                               fstio.read_fst(f"{lang_dir}/G.fst"), transition_scale, self_loop_scale)
    except RuntimeError as e:  # OpenFst's and Kaldi's checks, e.g. a G that is not an acceptor of L's words
        raise NnetError(f"{lang_dir}: cannot compile HCLG: {gmm.kaldi_reason(e)}") from None
    for name in ("words.txt", "phones.txt"):  # HCLG.fst last: a graph dir with it is complete
        text = textfile.read_text(os.path.join(lang_dir, name), "symbol table")
        fileio.write_text(os.path.join(graph_dir, name), text)
    fstio.write_fst(hclg, os.path.join(graph_dir, "HCLG.fst"))
    logger.info(f"Wrote {graph_dir}/HCLG.fst: {hclg.num_states} states.")
