#!/usr/bin/env bash
# Kaldi's utils/split_data.sh: DATA/splitN/{1..N}/ with each data file cut to whole speakers,
# so per-speaker CMVN stays valid inside a job. Fewer speakers than N is an error.
set -euo pipefail
[ $# -eq 2 ] || { echo "Usage: utils/split_data.sh <data-dir> <num-to-split>   e.g. utils/split_data.sh data/train 4" 1>&2; exit 1; }
data=$1; n=$2
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "$0: Invalid num-split argument '$n': expected a positive integer" 1>&2; exit 1; }
[ -f $data/spk2utt ] || { echo "$0: expected file $data/spk2utt to exist" 1>&2; exit 1; }
nspk=$(wc -l < $data/spk2utt)
[ $nspk -ge $n ] || { echo "$0: $data has $nspk speakers, fewer than $n jobs" 1>&2; exit 1; }
dir=$data/split$n
# Reuse a split newer than every file it was cut from.
if [ -f $dir/.done ] && [ -z "$(find $data -maxdepth 1 -type f -newer $dir/.done)" ]; then exit 0; fi
rm -rf $dir
for j in $(seq $n); do mkdir -p $dir/$j; done
# Speaker k goes to job (k mod n) + 1; every per-utterance file follows its speaker.
awk -v n=$n -v dir=$dir '{ j = (NR - 1) % n + 1; print > (dir "/" j "/spk2utt");
  for (i = 2; i <= NF; i++) print $i, j > (dir "/utt2job") }' $data/spk2utt
# With a segments file, wav.scp lists recordings: each job gets those its segments cut from.
per_utt="utt2spk text feats.scp synth.plan segments"; [ -f $data/segments ] || per_utt="$per_utt wav.scp"
for f in $per_utt; do
  [ -f $data/$f ] || continue
  awk -v dir=$dir -v f=$f 'NR == FNR { job[$1] = $2; next } ($1 in job) { print > (dir "/" job[$1] "/" f) }' \
    $dir/utt2job $data/$f
done
if [ -f $data/segments ] && [ -f $data/wav.scp ]; then
  for j in $(seq $n); do
    awk 'NR == FNR { r[$2] = 1; next } ($1 in r)' $dir/$j/segments $data/wav.scp > $dir/$j/wav.scp
  done
fi
if [ -f $data/cmvn.scp ]; then
  for j in $(seq $n); do
    awk 'NR == FNR { s[$1] = 1; next } ($1 in s)' $dir/$j/spk2utt $data/cmvn.scp > $dir/$j/cmvn.scp
  done
fi
rm $dir/utt2job
touch $dir/.done
