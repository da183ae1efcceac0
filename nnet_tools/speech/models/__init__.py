"""Stage 4, acoustic models: HMM-GMM training and alignment with Kaldi's own code (kaldi-hmm-gmm),
one function per Kaldi program of steps/train_mono.sh: the model and its file, gmm-init-mono
(gmm.py); compile-train-graphs, align-equal-compiled, gmm-align-compiled (align.py);
gmm-acc-stats-ali, gmm-sum-accs and gmm-est with mix-up (estimate.py); gmm-compute-likes
(likelihoods.py). ali-to-pdf is the model's transition-id -> pdf-id map (gmm.py).
"""
