"""Stage 1, the corpus: utterances synthesised offline with espeak-ng (speakers, plans, waveforms,
written as a Kaldi data dir) in synth.py, connected digits there and the sentences of an RM-like
~1000-word command grammar, split by speaker and by sentence, in commands.py; Kaldi ``text``
transcript files ('utt word1 word2 ...') and their words against a lang dir's in transcripts.py,
which training and scoring read; a data dir of any origin checked as Kaldi's
validate_data_dir.sh checks it, and its ``segments`` file, in datadir.py.
"""
