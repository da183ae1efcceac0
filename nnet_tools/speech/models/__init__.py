"""Stage 4, acoustic models: HMM-GMM training and alignment with Kaldi's own code (kaldi-hmm-gmm),
one function per Kaldi program of steps/train_{mono,deltas,lda_mllt,sat}.sh: the model, its file
(which keeps its tree), gmm-init-mono, gmm-init-model, gmm-transform-means (gmm.py);
compile-train-graphs, align-equal-compiled, gmm-align-compiled, SplitToPhones and convert-ali
(align.py); gmm-acc-stats-ali, gmm-sum-accs, gmm-est and gmm-mixup (estimate.py);
gmm-compute-likes (likelihoods.py); the triphone tree: acc-tree-stats and sum-tree-stats
(tree_stats.py), cluster-phones and compile-questions (questions.py), build-tree and Kaldi's tree
file (tree.py). ali-to-pdf is the model's transition-id -> pdf-id map (gmm.py). The feature
transforms these models use (LDA, MLLT, fMLLR) are in nnet_tools/speech/transforms.
"""
