#!/usr/bin/env python3
"""Plan the spoken-digits corpus: data/{train,test} (wav.scp, text, utt2spk, spk2utt, synth.plan),
train and test speakers disjoint. The waveforms are made next, by local/synth_wavs.py per job."""
from nnet_tools.cli import quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # Ctrl-C during the imports (seconds) ends it quietly

import click  # noqa: E402

from nnet_tools.cli.common import program  # noqa: E402
from nnet_tools.log import logger  # noqa: E402
from nnet_tools.speech.corpus import synth  # noqa: E402


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
