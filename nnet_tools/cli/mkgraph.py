import os
import shutil

import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech import gmm, graph, lang


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
    lng = lang.load(lang_dir)
    mdl = gmm.load(model)
    hclg = graph.make_hclg(lng, mdl, lang.read_fst(f"{lang_dir}/L_disambig.fst"), lang.read_fst(f"{lang_dir}/G.fst"),
                           transition_scale, self_loop_scale)
    os.makedirs(graph_dir, exist_ok=True)
    lang.write_fst(hclg, os.path.join(graph_dir, "HCLG.fst"))
    for name in ("words.txt", "phones.txt"):
        shutil.copyfile(os.path.join(lang_dir, name), os.path.join(graph_dir, name))
    logger.info(f"Wrote {graph_dir}/HCLG.fst: {hclg.num_states} states.")
