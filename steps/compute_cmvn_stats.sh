#!/usr/bin/env bash
# Kaldi's steps/compute_cmvn_stats.sh: per-speaker CMVN statistics -> DATA/cmvn.scp.
set -euo pipefail
[ $# -eq 3 ] || { echo "Usage: steps/compute_cmvn_stats.sh <data-dir> <log-dir> <cmvn-dir>
 e.g.: steps/compute_cmvn_stats.sh data/train exp/make_mfcc/train mfcc" 1>&2; exit 1; }
data=$1; logdir=$2; cmvndir=$3
name=$(basename $data)
mkdir -p $logdir $cmvndir
cmvndir=$(cd $cmvndir && pwd)
nnet-compute-cmvn-stats --spk2utt $data/spk2utt scp:$data/feats.scp \
  ark,scp:$cmvndir/cmvn_$name.ark,$cmvndir/cmvn_$name.scp 2> $logdir/cmvn_$name.log || {
  echo "$0: failed, see $logdir/cmvn_$name.log" 1>&2; tail -1 $logdir/cmvn_$name.log 1>&2; exit 1; }
cp $cmvndir/cmvn_$name.scp $data/cmvn.scp
echo "$0: succeeded computing CMVN stats for $name"
