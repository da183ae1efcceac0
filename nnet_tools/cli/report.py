import click

from nnet_tools.report import summary as report
from nnet_tools.fileio import write_text
from nnet_tools.cli.common import program


@click.command()
@click.option("--write", is_flag=True, help="Also write EXP_DIR/accuracy.report.")
@click.argument("exp_dir")
@program("nnet-report")
def main(exp_dir, write):
    """Summarise an experiment dir from its logs: a one-line info and the per-iteration
    accuracy table (Kaldi's nnet3_dir_info.pl and accuracy.report).

    \b
    Example:
      nnet-report exp/nnet
    """
    table = report.accuracy_report(exp_dir)
    print(report.dir_info(exp_dir))
    print(table, end="")
    if write:
        write_text(f"{exp_dir}/accuracy.report", table)
