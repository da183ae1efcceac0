#!/usr/bin/env bash
# Kaldi's steps/train_lda_mllt.sh (tri2): CMVN features spliced +-4 frames (--splice-opts), LDA to
# --dim from the alignment dir's pdfs (silence weighted 0), a tree and one Gaussian per leaf on
# the LDA features (steps/init_tree_model.sh), then Kaldi's passes with MLLT estimated at
# --mllt-iters (steps/gmm_passes.sh). DIR/final.mat is the LDA+MLLT transform.
help_message="Usage: steps/train_lda_mllt.sh [options] <num-leaves> <tot-gauss> <data-dir> <lang-dir> <alignment-dir> <exp-dir>
 e.g.: steps/train_lda_mllt.sh --cmd \"\$train_cmd\" 2500 15000 data/train data/lang exp/tri1_ali exp/tri2
Options: --cmd, --num-iters (35), --max-iter-inc (25), --realign-iters (\"10 20 30\"), --mllt-iters (\"2 4 6 12\"),
         --dim (40), --splice-opts (\"--left-context 4 --right-context 4\"), --randprune (4.0), --power (0.25),
         --beam (10), --retry-beam (40), --cluster-thresh (-1), --stage (-5)"
set -euo pipefail
cmd="nnet-queue local"
stage=-5
num_iters=35
max_iter_inc=25
realign_iters="10 20 30"
mllt_iters="2 4 6 12"
dim=40
splice_opts="--left-context 4 --right-context 4"
randprune=4.0
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
utils/atomic_write.sh $dir/splice_opts echo "$splice_opts"
sdata=$data/split$nj
silphones=$(cat $lang/phones/silence.csl)
spliced="ark:nnet-apply-cmvn --utt2spk $sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- | nnet-splice-feats $splice_opts ark:- ark:- |"

if [ $stage -le -5 ]; then
  echo "$0: accumulating LDA statistics"
  $cmd JOB=1:$nj $dir/log/lda_acc.JOB.log \
    nnet-acc-lda --rand-prune $randprune --silence-phones $silphones --silence-weight 0.0 \
    $alidir/final.mdl "$spliced" ark:$alidir/ali.JOB.ark $dir/lda.JOB.acc
  $cmd $dir/log/lda_est.log nnet-est-lda --write-full-matrix $dir/full.mat --dim $dim $dir/0.mat \
    $(for j in $(seq $nj); do echo $dir/lda.$j.acc; done)
  rm $dir/lda.*.acc
fi
if [ $stage -le -4 ]; then
  rm -f $dir/feats.*.ark
  $cmd JOB=1:$nj $dir/log/feats.JOB.log nnet-transform-feats $dir/0.mat "$spliced" ark:$dir/feats.JOB.ark
fi
steps/init_tree_model.sh --cmd "$cmd" --stage $stage --cluster-thresh $cluster_thresh $numleaves $lang $alidir $dir
steps/gmm_passes.sh --cmd "$cmd" --nj $nj --stage $stage --num-iters $num_iters --realign-iters "$realign_iters" \
  --mllt-iters "$mllt_iters" --spliced-feats "$spliced" --silence-phones $silphones \
  --numgauss $numleaves --totgauss $totgauss --max-iter-inc $max_iter_inc --power $power \
  --beam $beam --retry-beam $retry_beam $sdata $lang $dir
rm -f $dir/feats.*.ark
echo "$0: done training LDA+MLLT system in $dir"
