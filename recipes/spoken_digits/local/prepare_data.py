#!/usr/bin/env python3
"""Plan the spoken-digits corpus: data/{train,test} (wav.scp, text, utt2spk, spk2utt, synth.plan),
train and test speakers disjoint. The waveforms are made next, by local/synth_wavs.py per job."""
import click

from nnet_tools.cli.common import program
from nnet_tools.log import logger
from nnet_tools.speech import synth


@click.command()
@click.option("--num-utts", default=1000, show_default=True, help="Utterances in all (train + test).")
@click.option("--num-speakers", default=50, show_default=True)
@click.option("--test-fraction", default=0.2, show_default=True, help="Share of speakers held out for test.")
@click.option("--seed", default=0, show_default=True)
@click.argument("data_dir")
@click.argument("wav_dir")
@program("local/prepare_data.py")
def main(num_utts, num_speakers, test_fraction, seed, data_dir, wav_dir):
    """Example: local/prepare_data.py --num-utts 1000 data wav"""
    plan = synth.make_plan(num_utts, num_speakers, test_fraction, seed)
    for part in ("train", "test"):
        synth.write_data_dir(plan[part], f"{data_dir}/{part}", wav_dir)
        logger.info(f"{data_dir}/{part}: {len(plan[part])} utterances, "
                    f"{len({u['speaker'] for u in plan[part]})} speakers")


if __name__ == "__main__":
    main()
