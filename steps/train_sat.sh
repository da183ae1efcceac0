#!/usr/bin/env bash
# Kaldi's steps/train_sat.sh (tri3): speaker-adaptive training on the alignment dir's features
# (LDA+MLLT, or deltas) through per-speaker fMLLR transforms: the first estimated with the
# alignment dir's model, a tree and one Gaussian per leaf on the adapted features
# (steps/init_tree_model.sh), then Kaldi's passes, re-estimating the transforms at
# --fmllr-iters (steps/gmm_passes.sh). DIR/trans.JOB are the training speakers' transforms.
# Last, as Kaldi, DIR/final.alimdl: the final model's Gaussians re-estimated on the
# speaker-independent features (posteriors from the adapted ones), for the first pass of
# steps/align_fmllr.sh and steps/decode_fmllr.sh.
help_message="Usage: steps/train_sat.sh [options] <num-leaves> <tot-gauss> <data-dir> <lang-dir> <alignment-dir> <exp-dir>
 e.g.: steps/train_sat.sh --cmd \"\$train_cmd\" 2500 15000 data/train data/lang exp/tri2_ali exp/tri3
Options: --cmd, --num-iters (35), --max-iter-inc (25), --realign-iters (\"10 20 30\"), --fmllr-iters (\"2 4 6 12\"),
         --power (0.25), --beam (10), --retry-beam (40), --cluster-thresh (-1), --stage (-5)"
set -euo pipefail
cmd="nnet-queue local"
stage=-5
num_iters=35
max_iter_inc=25
realign_iters="10 20 30"
fmllr_iters="2 4 6 12"
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
for f in final.mat splice_opts; do   # the features stay the alignment dir's
  rm -f $dir/$f
  if [ -f $alidir/$f ]; then utils/atomic_write.sh $dir/$f cat $alidir/$f; fi
done
sdata=$data/split$nj
silphones=$(cat $lang/phones/silence.csl)
sifeats=$(steps/gmm_feats.sh $sdata $alidir)

if [ $stage -le -5 ]; then
  echo "$0: obtaining initial fMLLR transforms since not present in $alidir"
  $cmd JOB=1:$nj $dir/log/fmllr.0.JOB.log \
    nnet-gmm-est-fmllr --spk2utt ark:$sdata/JOB/spk2utt --silence-phones $silphones --silence-weight 0.0 \
    $alidir/final.mdl "$sifeats" ark:$alidir/ali.JOB.ark ark:$dir/trans.JOB
fi
if [ $stage -le -4 ]; then
  rm -f $dir/feats.*.ark
  $cmd JOB=1:$nj $dir/log/feats.JOB.log \
    nnet-transform-feats --utt2spk ark:$sdata/JOB/utt2spk ark:$dir/trans.JOB "$sifeats" ark:$dir/feats.JOB.ark
fi
steps/init_tree_model.sh --cmd "$cmd" --stage $stage --cluster-thresh $cluster_thresh $numleaves $lang $alidir $dir
steps/gmm_passes.sh --cmd "$cmd" --nj $nj --stage $stage --num-iters $num_iters --realign-iters "$realign_iters" \
  --fmllr-iters "$fmllr_iters" --si-feats "$sifeats" --silence-phones $silphones \
  --numgauss $numleaves --totgauss $totgauss --max-iter-inc $max_iter_inc --power $power \
  --beam $beam --retry-beam $retry_beam $sdata $lang $dir
if [ $stage -le $num_iters ]; then
  echo "$0: estimating the alignment model final.alimdl"
  $cmd JOB=1:$nj $dir/log/acc_alimdl.JOB.log \
    nnet-gmm-acc-stats-ali --stats-feats "$sifeats" $dir/final.mdl ark:$dir/feats.JOB.ark ark:$dir/ali.JOB.ark $dir/final.JOB.acc
  $cmd $dir/log/est_alimdl.log nnet-gmm-est --power $power --remove-low-count-gaussians false $dir/final.mdl \
    $(for j in $(seq $nj); do echo $dir/final.$j.acc; done) $dir/final.alimdl
  rm $dir/final.*.acc
fi
rm -f $dir/feats.*.ark
echo "$0: done training SAT system in $dir"
