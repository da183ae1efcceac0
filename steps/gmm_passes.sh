#!/usr/bin/env bash
# The training passes all of Kaldi's GMM scripts (train_mono.sh, train_deltas.sh,
# train_lda_mllt.sh) share: for x = first..num-iters-1, realign at --realign-iters, estimate MLLT
# at --mllt-iters (LDA+MLLT only), accumulate, re-estimate with mix-up towards --totgauss (the
# Gaussians grow by equal steps up to pass --max-iter-inc); then DIR/final.mdl.
# Features: DIR/feats.JOB.ark, made by the calling script (Kaldi recomputes them every pass);
# with MLLT, DIR/0.mat is the LDA matrix and each MLLT pass x composes DIR/x.mat, redumping them;
# with fMLLR (SAT), each --fmllr-iters pass composes a new per-speaker DIR/trans.JOB on the last.
help_message="Usage: steps/gmm_passes.sh [options] <split-data-dir> <lang-dir> <exp-dir>
 e.g.: steps/gmm_passes.sh --nj 4 --num-iters 35 --realign-iters \"10 20 30\" --numgauss 800 --totgauss 5000 data/train/split4 data/lang exp/tri1
Options: --nj, --cmd, --first-iter (1), --num-iters (35), --realign-iters, --numgauss, --totgauss,
         --max-iter-inc (25), --power (0.25), --beam (10), --retry-beam (40), --stage,
         --mllt-iters and --spliced-feats (LDA+MLLT: the spliced features' rspecifier, JOB in it),
         --fmllr-iters and --si-feats (SAT: the speaker-independent features' rspecifier),
         --silence-phones (colon-separated ids: weighted 0 in the MLLT and fMLLR statistics, as Kaldi)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
stage=-10
first_iter=1
num_iters=35
realign_iters="10 20 30"
mllt_iters=
spliced_feats=
fmllr_iters=
si_feats=
silence_phones=
numgauss=
totgauss=
max_iter_inc=25
power=0.25
beam=10
retry_beam=40
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
sdata=$1; lang=$2; dir=$3
[[ "$numgauss" =~ ^[0-9]+$ && "$totgauss" =~ ^[0-9]+$ ]] || \
  { echo "$0: --numgauss and --totgauss must be integers, got '$numgauss' and '$totgauss'" 1>&2; exit 1; }
incgauss=$(( (totgauss - numgauss) / max_iter_inc ))
feats="ark:$dir/feats.JOB.ark"
cur_mat=$dir/0.mat
in_list() { echo " $2 " | grep -q " $1 "; }
x=$first_iter
while [ $x -lt $num_iters ]; do
  echo "$0: pass $x"
  if [ $stage -le $x ]; then
    if in_list $x "$realign_iters"; then
      echo "$0: aligning data"
      $cmd JOB=1:$nj $dir/log/align.$x.JOB.log \
        nnet-gmm-align $scale_opts --beam $beam --retry-beam $retry_beam $dir/$x.mdl $lang $feats \
        $sdata/JOB/text ark:$dir/ali.JOB.ark
    fi
    if in_list $x "$mllt_iters"; then
      echo "$0: estimating MLLT"
      $cmd JOB=1:$nj $dir/log/macc.$x.JOB.log \
        nnet-gmm-acc-mllt --rand-prune 4.0 ${silence_phones:+--silence-phones $silence_phones --silence-weight 0.0} $dir/$x.mdl $feats ark:$dir/ali.JOB.ark $dir/$x.JOB.macc
      $cmd $dir/log/mupdate.$x.log nnet-est-mllt $dir/$x.mat.new $dir/$x.*.macc
      $cmd $dir/log/transform_means.$x.log nnet-gmm-transform-means $dir/$x.mat.new $dir/$x.mdl $dir/$x.mdl
      $cmd $dir/log/compose.$x.log nnet-compose-transforms $dir/$x.mat.new $cur_mat $dir/$x.mat
      rm $dir/$x.*.macc $dir/$x.mat.new
      $cmd JOB=1:$nj $dir/log/feats.$x.JOB.log nnet-transform-feats $dir/$x.mat "$spliced_feats" ark:$dir/feats.JOB.ark
    fi
    if in_list $x "$fmllr_iters"; then
      echo "$0: re-estimating fMLLR transforms"
      $cmd JOB=1:$nj $dir/log/fmllr.$x.JOB.log bash -o pipefail -c \
        "nnet-gmm-est-fmllr --spk2utt ark:$sdata/JOB/spk2utt ${silence_phones:+--silence-phones $silence_phones --silence-weight 0.0} \
           $dir/$x.mdl $feats ark:$dir/ali.JOB.ark ark:$dir/tmp_trans.JOB &&
         nnet-compose-transforms --b-is-affine true ark:$dir/tmp_trans.JOB ark:$dir/trans.JOB ark:$dir/composed_trans.JOB &&
         mv $dir/composed_trans.JOB $dir/trans.JOB && rm $dir/tmp_trans.JOB &&
         nnet-transform-feats --utt2spk ark:$sdata/JOB/utt2spk ark:$dir/trans.JOB '$si_feats' ark:$dir/feats.JOB.ark"
    fi
    $cmd JOB=1:$nj $dir/log/acc.$x.JOB.log nnet-gmm-acc-stats-ali $dir/$x.mdl $feats ark:$dir/ali.JOB.ark $dir/$x.JOB.acc
    $cmd $dir/log/update.$x.log nnet-gmm-est --srand $x --mix-up $numgauss --power $power \
      $dir/$x.mdl $(for j in $(seq $nj); do echo $dir/$x.$j.acc; done) $dir/$((x+1)).mdl
    rm $dir/$x.mdl $dir/$x.*.acc
  fi
  in_list $x "$mllt_iters" && cur_mat=$dir/$x.mat
  [ $x -le $max_iter_inc ] && numgauss=$((numgauss + incgauss))
  x=$((x+1))
done
[ -z "$mllt_iters" ] || utils/atomic_write.sh $dir/final.mat cat $cur_mat
utils/atomic_write.sh $dir/final.mdl cat $dir/$x.mdl
grep -h "Overall avg like per frame (Gaussian only)" $dir/log/acc.$((x-1)).*.log | sed 's/^LOG ([^)]*) //' | head -1
