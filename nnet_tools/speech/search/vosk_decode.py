"""Decoding with vosk (Kaldi's online2 nnet3 decoder in a wheel) over a model dir that
steps/make_vosk_model.sh wrote: the check that an exported model decodes in Kaldi's own C++
decoder as it does in ours, and the anchor for our decoder's speed.

vosk computes the features (conf/fbank.conf or mfcc.conf) and the CMVN (am/global_cmvn.stats'
mean) itself from the audio, so the whole front end is under test too. An utterance it splits at an endpoint (a long
silence) gives several results; their words are joined.
"""
import json
import os

import numpy as np

from nnet_tools.cpp_stderr import stderr_captured
from nnet_tools.errors import NnetError
from nnet_tools.speech.lang.langdir import read_symbols

CHUNK_SECONDS = 0.2   # audio handed to the recogniser at a time, as a live stream would be


def _vosk():
    try:
        import vosk
    except ImportError:
        raise NnetError("vosk is not installed (pip install -e '.[vosk]')") from None
    vosk.SetLogLevel(-1)   # its warnings and errors only
    return vosk


class VoskDecoder:
    """vosk.Model over ``model_dir``; ``decode`` gives an utterance's word ids (graph/words.txt)."""

    def __init__(self, model_dir):
        vosk = _vosk()
        for name in ("am/final.mdl", "graph/HCLG.fst", "graph/words.txt", "conf/model.conf"):
            if not os.path.isfile(os.path.join(model_dir, name)):
                raise NnetError(f"{model_dir}: not a vosk model dir: no {name} (steps/make_vosk_model.sh writes one)")
        self.words = read_symbols(os.path.join(model_dir, "graph", "words.txt"))
        said = []
        try:
            with stderr_captured(said):   # Kaldi's C++ ERROR lines: the reason goes into ours
                self.model = vosk.Model(model_dir)
        except Exception:
            errors = [line for line in "".join(said).splitlines() if line.startswith("ERROR")]
            reason = errors[-1].split(") ", 1)[-1] if errors else "see its log"
            raise NnetError(f"{model_dir}: vosk could not load the model: {reason}") from None
        self._recognizer = vosk.KaldiRecognizer

    def decode(self, samples, rate, where):
        """Word ids of one utterance: ``samples`` a 1-d array in int16 scale, as Kaldi reads wavs."""
        pcm = np.clip(np.rint(samples), -32768, 32767).astype("<i2")
        recognizer = self._recognizer(self.model, float(rate))
        texts, step = [], max(1, int(CHUNK_SECONDS * rate))
        for start in range(0, len(pcm), step):
            if recognizer.AcceptWaveform(pcm[start:start + step].tobytes()):
                texts.append(json.loads(recognizer.Result())["text"])
        texts.append(json.loads(recognizer.FinalResult())["text"])
        words = " ".join(texts).split()
        unknown = [w for w in words if w not in self.words]
        if unknown:
            raise NnetError(f"{where}: vosk gave the word '{unknown[0]}', which graph/words.txt does not hold")
        return [self.words[w] for w in words]
