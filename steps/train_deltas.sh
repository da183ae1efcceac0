#!/usr/bin/env bash
# Kaldi's steps/train_deltas.sh: a triphone GMM (tri1) on CMVN + delta features: a tree and one
# Gaussian per leaf from the alignment dir's alignments (steps/init_tree_model.sh), then Kaldi's
# passes (steps/gmm_passes.sh).
help_message="Usage: steps/train_deltas.sh [options] <num-leaves> <tot-gauss> <data-dir> <lang-dir> <alignment-dir> <exp-dir>
 e.g.: steps/train_deltas.sh --cmd \"\$train_cmd\" 2000 10000 data/train data/lang exp/mono_ali exp/tri1
Options: --cmd, --num-iters (35), --max-iter-inc (25), --realign-iters (\"10 20 30\"), --power (0.25),
         --beam (10), --retry-beam (40), --cluster-thresh (-1), --stage (-4)"
set -euo pipefail
cmd="nnet-queue local"
stage=-4
num_iters=35
max_iter_inc=25
realign_iters="10 20 30"
power=0.25
beam=10
retry_beam=40
cluster_thresh=-1
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 6 ] || { echo "$help_message" 1>&2; exit 1; }
numleaves=$1; totgauss=$2; data=$3; lang=$4; alidir=$5; dir=$6
[[ "$numleaves" =~ ^[0-9]+$ && "$totgauss" =~ ^[0-9]+$ ]] || \
  { echo "$0: <num-leaves> and <tot-gauss> must be integers, got '$numleaves' and '$totgauss'" 1>&2; exit 1; }
for f in $alidir/final.mdl $alidir/ali.1.ark $alidir/num_jobs $data/feats.scp $data/cmvn.scp $lang/phones/roots.int; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
nj=$(cat $alidir/num_jobs)   # split as the alignments are: job JOB's features are ali.JOB's
utils/validate_data_dir.sh --lang $lang $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
sdata=$data/split$nj

if [ $stage -le -4 ]; then
  rm -f $dir/feats.*.ark
  $cmd JOB=1:$nj $dir/log/feats.JOB.log nnet-copy-feats "$(steps/gmm_feats.sh $sdata $alidir)" ark:$dir/feats.JOB.ark
fi
steps/init_tree_model.sh --cmd "$cmd" --stage $stage --cluster-thresh $cluster_thresh $numleaves $lang $alidir $dir
steps/gmm_passes.sh --cmd "$cmd" --nj $nj --stage $stage --num-iters $num_iters --realign-iters "$realign_iters" \
  --numgauss $numleaves --totgauss $totgauss --max-iter-inc $max_iter_inc --power $power \
  --beam $beam --retry-beam $retry_beam $sdata $lang $dir
rm -f $dir/feats.*.ark
echo "$0: done training triphone system in $dir"
