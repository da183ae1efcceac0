#!/usr/bin/env bash
# Kaldi's steps/align_si.sh: align a data dir with a trained GMM -> DIR/ali.JOB.ark, DIR/final.mdl
# (and the model dir's tree, final.mat and splice_opts, so its features are the model's).
help_message="Usage: steps/align_si.sh [options] <data-dir> <lang-dir> <src-dir> <align-dir>
 e.g.: steps/align_si.sh --nj 4 --cmd \"\$train_cmd\" data/train data/lang exp/mono exp/mono_ali
Options: --nj, --cmd, --beam (10), --retry-beam (40)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
beam=10
retry_beam=40
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 4 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1; lang=$2; srcdir=$3; dir=$4
for f in $data/feats.scp $data/cmvn.scp $data/text $srcdir/final.mdl; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
utils/validate_data_dir.sh --lang $lang $data   # OOVs counted; a text in the wrong case refused
utils/split_data.sh $data $nj
mkdir -p $dir/log
sdata=$data/split$nj
utils/atomic_write.sh $dir/final.mdl cat $srcdir/final.mdl
for f in tree final.mat splice_opts; do   # what later steps read from an alignment dir, as Kaldi's copies
  rm -f $dir/$f
  if [ -f $srcdir/$f ]; then utils/atomic_write.sh $dir/$f cat $srcdir/$f; fi
done
utils/atomic_write.sh $dir/num_jobs echo $nj
feats=$(steps/gmm_feats.sh $sdata $dir)
$cmd JOB=1:$nj $dir/log/align.JOB.log \
  nnet-gmm-align $scale_opts --beam $beam --retry-beam $retry_beam $dir/final.mdl $lang "$feats" \
  $sdata/JOB/text ark:$dir/ali.JOB.ark
grep -h "Done [0-9]*, errors on" $dir/log/align.*.log | sed 's/^.*) //' | awk '{d += $2; e += $5} END {print "'$0': aligned " d " utterances, errors on " e}'
