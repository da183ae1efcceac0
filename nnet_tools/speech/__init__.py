"""Speech: Kaldi's hybrid HMM pipeline, one sub-package per stage, in order:

1. corpus:     the data: synthesised utterances (espeak-ng) as Kaldi data dirs (connected digits,
               a ~1000-word command grammar), and ``text`` transcripts.
2. features:   MFCC and fbank features (compute-{mfcc,fbank}-feats), add-deltas.
3. lang:       the dict dir and lang dir (prepare_lang.sh, word-position-dependent phones): lexicon
               and L.fst, grammar or trigram LM as G.fst (format_lm.sh), symbol tables, topology.
4. models:     GMM acoustic models: the model file, monophone and tree-based (triphone)
               initialisation, the tree, training-graph alignment, convert-ali, accumulation and
               ML re-estimation, likelihoods.
5. transforms: LDA, MLLT and fMLLR feature transforms (tri2, tri3).
6. search:     decoding: the graph HCLG (mkgraph.sh), the decoders (decode-faster-mapped,
               latgen-faster-mapped), lattices and their LM-weight sweep, and WER scoring.

A stage imports only earlier ones (and nnet_tools.data, .model, .errors, .fileio, .log,
.cpp_stderr). Kaldi's own HMM-GMM, FST and decoder code comes from the k2-fsa wheels (the
``speech`` extra). Import ``kaldi_hmm_gmm`` before ``kaldifst``/``kaldi_decoder`` in one process:
the other order hangs inside the extension's initialisation (see models/gmm.py's import of
kaldi_hmm_gmm first).
"""
