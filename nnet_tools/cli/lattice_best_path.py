import sys

import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang.langdir import read_symbols
from nnet_tools.speech.search import lattice_best_path, lattice_io


@click.command()
@click.option("--acoustic-scale", default=1.0, show_default=True, help="Scaling factor for acoustic likelihoods.")
@click.option("--lm-scale", default=1.0, show_default=True,
              help="Scaling factor for graph (LM) costs; only acoustic-scale / lm-scale matters.")
@click.option("--word-ins-penalty", default=0.0, show_default=True,
              help="Added to the (scaled) graph cost of every word (Kaldi's lattice-add-penalty).")
@click.option("--lmwt-range", default=None, metavar="A:B",
              help="Sweep: for each integer LMWT in A..B, acoustic scale 1/LMWT (lattice-scale "
                   "--inv-acoustic-scale=LMWT); the output specifiers name LMWT, replaced by each value.")
@click.option("--word-ins-penalties", default=None, metavar="P,P,...",
              help="Sweep: each penalty in turn (e.g. 0.0,0.5,1.0); the output specifiers name WIP, "
                   "replaced by each as written.")
@click.option("--word-symbol-table", default=None, help="Symbol table for words (prints each best path to stderr).")
@click.argument("lattice_rspecifier")
@click.argument("words_wspecifier", required=False)
@click.argument("alignments_wspecifier", required=False)
@program("nnet-lattice-best-path")
def main(acoustic_scale, lm_scale, word_ins_penalty, lmwt_range, word_ins_penalties, word_symbol_table,
         lattice_rspecifier, words_wspecifier, alignments_wspecifier):
    """Best path through each lattice: its word-ids and transition-ids (Kaldi's lattice-best-path,
    after lattice-scale and lattice-add-penalty).

    With --lmwt-range and/or --word-ins-penalties, one pass over the lattices gives the best
    path of every (LMWT, penalty) pair, each written to its own table: Kaldi's score_kaldi.sh
    sweep, which runs a lattice-scale | lattice-add-penalty | lattice-best-path pipeline per pair.

    \b
    Examples:
      nnet-lattice-best-path --acoustic-scale 0.1 "ark:gunzip -c exp/mono/decode_test/lat.1.gz |" ark,t:words.txt
      nnet-lattice-best-path --lmwt-range 7:17 --word-ins-penalties 0.0,0.5,1.0 \\
        "ark:gunzip -c exp/mono/decode_test/lat.*.gz |" ark,t:exp/mono/decode_test/scoring_kaldi/penalty_WIP/LMWT.int
    """
    sweep = lmwt_range is not None or word_ins_penalties is not None
    if sweep:
        if lmwt_range is not None and acoustic_scale != 1.0:
            raise NnetError("--acoustic-scale and --lmwt-range both set the acoustic scale: give one")
        if word_ins_penalties is not None and word_ins_penalty != 0.0:
            raise NnetError("--word-ins-penalty and --word-ins-penalties: give one")
        lmwts = ([(str(w), 1.0 / w) for w in lattice_best_path.check_lmwt_range(lmwt_range)] if lmwt_range
                 else [(None, acoustic_scale)])
        wips = (lattice_best_path.check_penalties(word_ins_penalties) if word_ins_penalties
                else [(None, word_ins_penalty)])
        combos = [(lmwt, wip, (lm_scale, ac, penalty)) for wip, penalty in wips for lmwt, ac in lmwts]
    else:
        combos = [(None, None, (lm_scale, acoustic_scale, word_ins_penalty))]
    for spec in (words_wspecifier, alignments_wspecifier):
        for name, many in (("LMWT", lmwt_range is not None and len(lmwts) > 1),
                           ("WIP", word_ins_penalties is not None and len(wips) > 1)):
            if spec and sweep and many and name not in spec:
                raise NnetError(f"'{spec}' does not name {name}: every setting of the sweep would write it")
    symbols = None
    if word_symbol_table:
        symbols = {i: w for w, i in read_symbols(word_symbol_table).items()}

    def named(spec, lmwt, wip):
        if spec is None:
            return None
        return spec.replace("LMWT", lmwt or "LMWT").replace("WIP", wip or "WIP") if sweep else spec

    writers = []
    try:
        for lmwt, wip, _ in combos:
            specs = (named(words_wspecifier, lmwt, wip), named(alignments_wspecifier, lmwt, wip))
            writers.append(tuple(tables.IntVectorWriter(s) if s else None for s in specs))
        settings = [c[2] for c in combos]
        done = failed = 0
        totals = [[0.0, 0.0, 0] for _ in combos]   # graph, acoustic, frames
        for key, lat in lattice_io.read_lattices(lattice_rspecifier):
            paths = lattice_best_path.best_paths(lat, settings, f"{lattice_rspecifier}: key '{key}'")
            if paths[0] is None:
                logger.warning(f"Best-path failed for key {key}")
                failed += 1
                continue
            for (words_w, ali_w), path, total in zip(writers, paths, totals):
                if words_w:
                    words_w.write(key, path.words)
                if ali_w:
                    ali_w.write(key, path.tids)
                total[0] += path.graph
                total[1] += path.acoustic
                total[2] += len(path.tids)
            if not sweep:
                path = paths[0]
                logger.info(f"For utterance {key}, best cost {path.graph:.6g} + {path.acoustic:.6g} = "
                            f"{path.graph + path.acoustic:.6g} over {len(path.tids)} frames.")
            if symbols is not None:
                print(" ".join([key] + [symbols.get(w, str(w)) for w in paths[0].words]), file=sys.stderr, flush=True)
            done += 1
        for (lmwt, wip, _), (graph, acoustic, frames) in zip(combos, totals):
            which = " ".join(x for x in (f"LMWT={lmwt}" if lmwt else "", f"WIP={wip}" if wip else "") if x)
            if frames:
                logger.info(f"{which + ': ' if which else ''}Overall cost per frame is "
                            f"{(graph + acoustic) / frames:.6g} = {graph / frames:.6g} [graph] + "
                            f"{acoustic / frames:.6g} [acoustic] over {frames} frames.")
        logger.info(f"Done {done} lattices, failed for {failed}")
        if not done:
            raise NnetError(f"{lattice_rspecifier}: no best path found ({failed} lattices failed)")
        for pair in writers:
            for w in pair:
                if w:
                    w.close()
    except BaseException:
        for pair in writers:
            for w in pair:
                if w:
                    w.abort()
        raise
