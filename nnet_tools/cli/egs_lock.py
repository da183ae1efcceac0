import click

from nnet_tools.data.get_egs import release_lock, take_lock
from nnet_tools.cli.common import program


@click.command(context_settings={"show_default": True})
@click.option("--release", is_flag=True, default=False, help="Release the lock if process PID holds it "
              "(else leave it).")
@click.option("--verbose", type=int, default=0)
@click.argument("pid", type=int)
@click.argument("egs_dir")
@program("nnet-egs-lock")
def main(pid, egs_dir, release, verbose):
    """Take EGS_DIR/get_egs.lock for process PID and leave it held (or --release it): a shell step
    owns an egs dir for its lifetime this way. A second owner is refused, rc 1, with one line naming
    the holder; a dead holder's lock is taken over with a warning. PID must be a running process
    (a lock for none could never be judged dead by its pid).

    \b
    Example (what steps/get_egs.sh does around its jobs):
      nnet-egs-lock $$ exp/egs; trap 'nnet-egs-lock --release $$ exp/egs' EXIT
    """
    (release_lock if release else take_lock)(egs_dir, pid)
