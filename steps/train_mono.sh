#!/usr/bin/env bash
# Kaldi's steps/train_mono.sh: flat-start monophone GMM training. Features: apply-cmvn per
# speaker + add-deltas, dumped once per job (Kaldi recomputes them in a pipe every pass).
help_message="Usage: steps/train_mono.sh [options] <data-dir> <lang-dir> <exp-dir>
 e.g.: steps/train_mono.sh --nj 4 --cmd \"\$train_cmd\" data/train data/lang exp/mono
Options: --nj, --cmd, --num-iters (40), --totgauss (1000), --max-iter-inc (30), --power (0.25),
         --realign-iters, --beam (6), --retry-beam (40), --stage"
set -euo pipefail
cmd="nnet-queue local"
nj=4
stage=-4
num_iters=40
max_iter_inc=30
totgauss=1000
power=0.25
beam=6
retry_beam=40
realign_iters="1 2 3 4 5 6 7 8 9 10 12 14 16 18 20 23 26 29 32 35 38"
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
[ "$max_iter_inc" -ge 1 ] 2>/dev/null || { echo "$0: --max-iter-inc must be an integer >= 1" 1>&2; exit 1; }
[[ "$stage" =~ ^-?[0-9]+$ ]] || { echo "$0: --stage must be an integer, got '$stage'" 1>&2; exit 1; }
data=$1; lang=$2; dir=$3
# Every later stage reads the Gaussian count that stage -3 logged.
[ $stage -le -3 ] || [ -f $dir/log/init.log ] || \
  { echo "$0: --stage $stage needs $dir/log/init.log, which stage -3 writes" 1>&2; exit 1; }
for f in $data/feats.scp $data/cmvn.scp $data/text $lang/L.fst $lang/topo $lang/phones/sets.int; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
# The data dir as Kaldi's validate_data_dir.sh checks it, and its words against the lexicon's:
# OOVs counted (nnet-gmm-align maps them to oov.txt's word), a text in the wrong case refused.
utils/validate_data_dir.sh --lang $lang $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
sdata=$data/split$nj
feats="ark:$dir/feats.JOB.ark"

if [ $stage -le -4 ]; then
  rm -f $dir/feats.*.ark   # an earlier run's: they would need room beside the new ones
  $cmd JOB=1:$nj $dir/log/feats.JOB.log \
    nnet-add-deltas "ark:nnet-apply-cmvn --utt2spk $sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- |" \
    ark:$dir/feats.JOB.ark
fi
if [ $stage -le -3 ]; then
  echo "$0: initializing monophone system."
  $cmd $dir/log/init.log nnet-gmm-init-mono --shared-phones $lang/phones/sets.int $lang ark:$dir/feats.1.ark $dir/0.mdl
fi
if [ $stage -le -2 ]; then
  echo "$0: aligning data equally (pass 0)"
  $cmd JOB=1:$nj $dir/log/align.0.JOB.log \
    nnet-gmm-align --equal $dir/0.mdl $lang $feats $sdata/JOB/text ark:$dir/ali.JOB.ark
fi
numgauss=$(grep -o "[0-9]* pdfs" $dir/log/init.log | head -1 | awk '{print $1}')
if [ $stage -le -1 ]; then
  $cmd JOB=1:$nj $dir/log/acc.0.JOB.log nnet-gmm-acc-stats-ali $dir/0.mdl $feats ark:$dir/ali.JOB.ark $dir/0.JOB.acc
  $cmd $dir/log/update.0.log nnet-gmm-est --min-gaussian-occupancy 3 --mix-up $numgauss --power $power \
    $dir/0.mdl $(for j in $(seq $nj); do echo $dir/0.$j.acc; done) $dir/1.mdl
  rm $dir/0.*.acc
fi
steps/gmm_passes.sh --cmd "$cmd" --nj $nj --stage $stage --num-iters $num_iters --realign-iters "$realign_iters" \
  --numgauss $numgauss --totgauss $totgauss --max-iter-inc $max_iter_inc --power $power \
  --beam $beam --retry-beam $retry_beam $sdata $lang $dir
rm -f $dir/feats.*.ark
echo "$0: done training monophone system in $dir"
