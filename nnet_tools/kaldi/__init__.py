"""Kaldi's file formats beyond tables: basic object I/O (stream), TransitionModel and topology
(transition_model), GMM final.mdl files and trees (gmm), alignments (alignments), nnet3 models:
components, nnets and AmNnetSimple final.mdl files, what nnet3-compute gives for them, and the
conversion to and from our models (components, nnet3, am, compute, convert)."""
