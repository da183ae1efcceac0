import click

from nnet_tools.report import plots, summary as report
from nnet_tools.fileio import write_text
from nnet_tools.cli.common import program


@click.command()
@click.option("--write", is_flag=True, help="Also write EXP_DIR/accuracy.report.")
@click.option("--plots", "plots_dir", metavar="OUTDIR", default=None,
              help="Also write PNG plots of every EXP_DIR, overlaid, and OUTDIR/index.html (needs matplotlib).")
@click.option("--x-axis", type=click.Choice(["iteration", "samples"]), default="iteration", show_default=True,
              help="The plots' x axis: the iteration, or the frames trained on before it (runs with "
                   "different numbers of jobs compared at equal data).")
@click.argument("exp_dirs", nargs=-1, required=True, metavar="EXP_DIR [EXP_DIR ...]")
@program("nnet-report")
def main(exp_dirs, write, plots_dir, x_axis):
    """Summarise experiment dirs from their logs: a one-line info and the per-iteration
    accuracy table (Kaldi's nnet3_dir_info.pl and accuracy.report); with --plots, the plots of
    Kaldi's generate_plots.py as PNGs, several dirs overlaid.

    \b
    Example:
      nnet-report exp/nnet
      nnet-report --plots exp/plots exp/nnet exp/nnet_8jobs
      nnet-report --plots exp/plots --x-axis samples exp/nnet_1job exp/nnet
    """
    texts = []
    for exp_dir in exp_dirs:
        table = report.accuracy_report(exp_dir)
        texts.append(report.dir_info(exp_dir) + "\n" + table)
        if write:
            write_text(f"{exp_dir}/accuracy.report", table)
    print("\n".join(texts), end="")
    if plots_dir:
        drawn = plots.write_plots(plots_dir, list(exp_dirs), "\n".join(texts), x_axis)
        print(f"Wrote {len(drawn)} plots and {plots_dir}/index.html")
