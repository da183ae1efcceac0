#!/usr/bin/env bash
# The GMM features of a model dir, as an rspecifier with JOB in it, as Kaldi's GMM steps build
# them: CMVN per speaker, then add-deltas, or, when the dir has final.mat (LDA+MLLT, tri2),
# splice-feats with its splice_opts and transform-feats. Scripts that train, align or decode a
# GMM all take their features from here.
set -euo pipefail
[ $# -eq 2 ] || { echo "Usage: steps/gmm_feats.sh <split-data-dir> <model-dir>" 1>&2
                  echo " e.g.: feats=\$(steps/gmm_feats.sh data/train/split4 exp/tri1)" 1>&2; exit 1; }
sdata=$1; srcdir=$2
cmvn="nnet-apply-cmvn --utt2spk $sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:-"
if [ -f $srcdir/final.mat ]; then
  echo "ark:$cmvn | nnet-splice-feats $(cat $srcdir/splice_opts) ark:- ark:- | nnet-transform-feats $srcdir/final.mat ark:- ark:- |"
else
  echo "ark:$cmvn | nnet-add-deltas ark:- ark:- |"
fi
