import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech.lang import lm


@click.command()
@click.argument("lang_dir")
@click.argument("arpa")
@click.argument("out_dir")
@program("nnet-format-lm")
def main(lang_dir, arpa, out_dir):
    """Copy the lang dir LANG_DIR to OUT_DIR and add G.fst made from the ARPA LM (Kaldi's
    utils/format_lm.sh: arpa2fst --disambig-symbol=#0 --read-symbol-table=words.txt, so <s> and
    </s> become epsilons and #0 marks the back-off arcs).

    \b
    Example:
      nnet-format-lm data/lang data/local/lm/trigram.arpa data/lang_test
    """
    g, warning = lm.format_lm(lang_dir, arpa, out_dir)
    if warning:
        logger.warning(warning)
    states, arcs = lm.fst_size(g)
    logger.info(f"Wrote {out_dir}/G.fst: {states} states, {arcs} arcs.")
