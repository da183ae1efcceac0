#!/usr/bin/env python3
"""Synthesise one job's share of a data dir's planned utterances with espeak-ng (16 kHz wav)."""
from nnet_tools.cli import quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # Ctrl-C during the imports (seconds) ends it quietly

import click  # noqa: E402

from nnet_tools.cli.common import program  # noqa: E402
from nnet_tools.log import logger  # noqa: E402
from nnet_tools.speech.corpus import synth  # noqa: E402


@click.command()
@click.option("--job", type=int, default=1, show_default=True)
@click.option("--num-jobs", type=int, default=1, show_default=True)
@click.argument("plan")
@click.argument("wav_dir")
@program("local/synth_wavs.py")
def main(job, num_jobs, plan, wav_dir):
    """Example: local/synth_wavs.py --job 1 --num-jobs 4 data/train/synth.plan wav"""
    done, kept = synth.synthesise_job(plan, wav_dir, job, num_jobs)
    logger.info(f"Synthesised {done} utterances ({kept} already there).")


if __name__ == "__main__":
    main()
