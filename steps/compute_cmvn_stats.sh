#!/usr/bin/env bash
# Kaldi's steps/compute_cmvn_stats.sh: per-speaker CMVN statistics -> DATA/cmvn.scp.
help_message="Usage: steps/compute_cmvn_stats.sh <data-dir> [<log-dir> [<cmvn-dir>]]
 e.g.: steps/compute_cmvn_stats.sh data/train exp/make_mfcc/train mfcc
 (as Kaldi's: <log-dir> defaults to <data-dir>/log, <cmvn-dir> to <data-dir>/data)"
set -euo pipefail
. "$(dirname "$0")/parse_options.sh"
[ $# -ge 1 ] && [ $# -le 3 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1; logdir=${2:-$data/log}; cmvndir=${3:-$data/data}
for f in $data/feats.scp $data/spk2utt; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
name=$(basename $data)
mkdir -p $logdir $cmvndir
cmvndir=$(cd $cmvndir && pwd)
nnet-compute-cmvn-stats --spk2utt $data/spk2utt scp:$data/feats.scp \
  ark,scp:$cmvndir/cmvn_$name.ark,$cmvndir/cmvn_$name.scp 2> $logdir/cmvn_$name.log || {
  echo "$0: failed, see $logdir/cmvn_$name.log" 1>&2; tail -1 $logdir/cmvn_$name.log 1>&2; exit 1; }
utils/atomic_write.sh $data/cmvn.scp cat $cmvndir/cmvn_$name.scp
echo "$0: succeeded computing CMVN stats for $name"
