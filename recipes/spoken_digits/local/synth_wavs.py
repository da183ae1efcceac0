#!/usr/bin/env python3
"""Synthesise one job's share of a data dir's planned utterances with espeak-ng (16 kHz wav)."""
import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech import synth


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
