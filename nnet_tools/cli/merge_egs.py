import click

from nnet_tools.data.get_egs import finish, merge_archive
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--finish", "finish_dir", is_flag=True, default=False,
              help="After every archive is merged: write the diagnostic and combine egs, the utterance "
              "lists and info/, and remove EGS_DIR/orig.")
@click.option("--verbose", type=int, default=0)
@click.argument("egs_dir")
@click.argument("archive", type=int, required=False)
@program("nnet-merge-egs")
def main(egs_dir, archive, finish_dir, verbose):
    """Complete an egs dir dumped by parallel jobs (nnet-get-egs --num-jobs N --job J): merge the
    jobs' pieces of archive ARCHIVE and shuffle them into EGS_DIR/egs.ARCHIVE.ark (Kaldi's
    nnet3-shuffle-egs, seed ARCHIVE + srand), or with --finish write the rest of the dir.

    \b
    Example (what steps/get_egs.sh --nj 4 runs after the dump jobs):
      nnet-queue local ARCHIVE=1:3 exp/egs/log/shuffle.ARCHIVE.log nnet-merge-egs exp/egs ARCHIVE
      nnet-merge-egs --finish exp/egs
    """
    if finish_dir == (archive is not None):
        raise click.UsageError("give either ARCHIVE or --finish")
    if finish_dir:
        finish(egs_dir)
    else:
        merge_archive(egs_dir, archive)
