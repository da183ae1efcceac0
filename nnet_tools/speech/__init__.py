"""Speech: synthetic connected digits, features, lang, monophone GMM, graphs, decoding, WER.

Kaldi's own HMM-GMM, FST and decoder code comes from the k2-fsa wheels (the ``speech`` extra).
Import ``kaldi_hmm_gmm`` before ``kaldifst``/``kaldi_decoder`` in one process: the other order
hangs inside the extension's initialisation (see gmm.py's import of kaldi_hmm_gmm first).
"""
