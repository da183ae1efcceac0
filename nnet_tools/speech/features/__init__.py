"""Stage 2, features: MFCC and fbank features of wav.scp utterances with kaldi-native-fbank,
Kaldi's arithmetic and Kaldi's conf-file options (extract.py: compute-mfcc-feats,
compute-fbank-feats), and the delta and delta-delta features the GMMs are trained on
(deltas.py: add-deltas).
"""
