import time

import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.features import extract
from nnet_tools.speech.search.vosk_decode import VoskDecoder


@click.command()
@click.argument("model_dir")
@click.argument("wav_rspecifier")
@click.argument("words_wspecifier")
@program("nnet-decode-vosk")
def main(model_dir, wav_rspecifier, words_wspecifier):
    """Decode the audio of a wav.scp with vosk (Kaldi's online2 nnet3 decoder) over MODEL_DIR, a
    vosk model dir (steps/make_vosk_model.sh); write word-ids, as nnet-decode-faster-mapped
    does, so that the same scoring reads both. vosk makes the features and the CMVN from the
    audio itself.

    \b
    Example:
      nnet-decode-vosk exp/nnet/vosk_model scp:data/test/wav.scp ark,t:exp/nnet/decode_test_vosk/words.1.txt
    """
    decoder = VoskDecoder(model_dir)
    done = failed = 0
    audio = 0.0
    start = time.perf_counter()
    with tables.IntVectorWriter(words_wspecifier) as writer:
        for utt, rxfilename in extract.read_wav_scp(wav_rspecifier):
            where = f"{wav_rspecifier}: utt '{utt}'"
            try:
                rate, samples = extract.read_wav(rxfilename, where)
            except NnetError as e:
                logger.warning(f"{e}; skipping it")
                failed += 1
                continue
            writer.write(utt, decoder.decode(samples, rate, where))
            done, audio = done + 1, audio + len(samples) / rate
    elapsed = time.perf_counter() - start
    if audio:
        logger.info(f"Timing stats: real-time factor was {elapsed / audio:g} ({elapsed:.2f} s for {audio:.2f} s "
                    "of audio, features included)")
    logger.info(f"Decoded {done} utterances, {failed} with errors.")
    if not done:
        raise NnetError(f"{wav_rspecifier}: no utterance decoded")
