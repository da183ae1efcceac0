"""Stage 1, the corpus: connected-digit utterances synthesised offline with espeak-ng (speakers,
plans, waveforms, written as a Kaldi data dir) in synth.py, and Kaldi ``text`` transcript files
('utt word1 word2 ...') in transcripts.py, which training and scoring read.
"""
