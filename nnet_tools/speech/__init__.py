"""Speech: Kaldi's HMM-GMM pipeline for connected digits, one sub-package per stage, in order:

1. corpus:   the data: synthesised utterances (espeak-ng) as Kaldi data dirs, and ``text`` transcripts.
2. features: MFCC and fbank features (compute-{mfcc,fbank}-feats), add-deltas.
3. lang:     the lang dir (prepare_lang.sh): lexicon and L.fst, grammar G.fst, symbol tables, topology.
4. models:   GMM acoustic models: the model file, gmm-init-mono, training-graph alignment,
             accumulation and ML re-estimation, likelihoods.
5. search:   decoding: the graph HCLG (mkgraph.sh), the decoder (decode-faster-mapped), and WER scoring.

A stage imports only earlier ones (and nnet_tools.data, .model, .errors, .fileio, .log,
.cpp_stderr). Kaldi's own HMM-GMM, FST and decoder code comes from the k2-fsa wheels (the
``speech`` extra). Import ``kaldi_hmm_gmm`` before ``kaldifst``/``kaldi_decoder`` in one process:
the other order hangs inside the extension's initialisation (see models/gmm.py's import of
kaldi_hmm_gmm first).
"""
