"""Feature transforms of Kaldi's LDA+MLLT and SAT stages (steps/train_lda_mllt.sh, train_sat.sh), in numpy: frame
splicing (splice.py: splice-feats); linear discriminant analysis from per-pdf statistics
(lda.py: acc-lda, est-lda); the maximum likelihood linear transform, also called global
semi-tied covariance, from per-Gaussian statistics of a GMM (mllt.py: gmm-acc-mllt,
est-mllt); per-speaker constrained MLLR (fmllr.py: gmm-est-fmllr, the transforms of speaker
adaptive training and of decode_fmllr.sh); the transform matrices themselves (matrix.py: Kaldi's matrix file, transform-feats,
compose-transforms); and the per-frame weights the accumulators take from an alignment
(weights.py: ali-to-post, weight-silence-post and Kaldi's randomized pruning). The statistics
files are .npz sums, as the GMM accumulators (models/estimate.py), which add across jobs; the
matrices are Kaldi's own files (final.mat, 0.mat), which Kaldi reads and writes.
"""
