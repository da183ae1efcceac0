#!/usr/bin/env python3
"""Plan the spoken-commands corpus (nnet_tools/speech/corpus/commands.py: an RM-like grammar of
993 words): data/{train,test} (wav.scp, text, utt2spk, spk2utt, synth.plan), split by speaker
and by sentence, and data/local/vocab.txt, the grammar's whole vocabulary (the lexicon's words).
The waveforms are made next, by local/synth_wavs.py per job."""
from nnet_tools.cli import quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # Ctrl-C during the imports (seconds) ends it quietly

import os  # noqa: E402

import click  # noqa: E402

from nnet_tools.cli.common import program  # noqa: E402
from nnet_tools.fileio import make_dirs, write_text  # noqa: E402
from nnet_tools.log import logger  # noqa: E402
from nnet_tools.speech.corpus import commands, synth  # noqa: E402


@click.command()
@click.option("--num-utts", default=2000, show_default=True, help="Utterances in all (train + test).")
@click.option("--num-speakers", default=100, show_default=True)
@click.option("--test-fraction", default=0.2, show_default=True, help="Share of speakers held out for test.")
@click.option("--seed", default=0, show_default=True)
@click.argument("data_dir")
@click.argument("wav_dir")
@program("local/prepare_data.py")
def main(num_utts, num_speakers, test_fraction, seed, data_dir, wav_dir):
    """Example: local/prepare_data.py --num-utts 2000 --num-speakers 100 data wav"""
    plan = commands.make_plan(num_utts, num_speakers, test_fraction, seed)
    for part in ("train", "test"):
        synth.write_data_dir(plan[part], f"{data_dir}/{part}", wav_dir)
        logger.info(f"{data_dir}/{part}: {len(plan[part])} utterances, "
                    f"{len({u['speaker'] for u in plan[part]})} speakers, "
                    f"{len({tuple(u['words']) for u in plan[part]})} distinct sentences")
    make_dirs(os.path.join(data_dir, "local"))
    write_text(os.path.join(data_dir, "local", "vocab.txt"), "".join(f"{w}\n" for w in commands.vocabulary()))
    s = commands.split_summary(plan)
    logger.info(f"Vocabulary: {s['vocabulary']} words ({data_dir}/local/vocab.txt); the training text has "
                f"{s['train_words']}; {s['test_only_words']} words of the test text are not in it "
                f"({s['test_oov_tokens']} of its {s['test_tokens']} words, "
                f"{100.0 * s['test_oov_tokens'] / max(s['test_tokens'], 1):.1f} %).")


if __name__ == "__main__":
    main()
