#!/usr/bin/env bash
# Dump shuffled training examples (egs) from a data dir: DATA/feats.scp + DATA/targets.scp
# (per-frame class ids) -> EGS_DIR/egs.*.ark, diagnostic and combine subsets, info/.
# With DATA/cmvn.scp (and DATA/utt2spk) the features get per-speaker CMVN first, as Kaldi's
# get_egs.sh does (apply-cmvn's defaults: means only); --apply-cmvn false turns it off.
# With --nj N (Kaldi's get_egs.sh --nj): N jobs through $cmd each dump a contiguous split of
# feats.scp into pieces of every archive, then one task per archive merges and shuffles its
# pieces, then a last task writes the diagnostic/combine egs and info/. --nj 1 (the default) is
# one nnet-get-egs process.
help_message="Usage: steps/get_egs.sh [options] <data-dir> <egs-dir>
 e.g.: steps/get_egs.sh --cmd \"\$train_cmd\" --frames-per-eg 8 --left-context 5 --right-context 5 data/train exp/egs
Options: --cmd, --frames-per-eg, --left-context, --right-context, --samples-per-iter,
         --num-utts-subset, --num-targets, --srand, --nj (parallel dump jobs, default 1),
         --compress true|false (2-byte inputs, Kaldi's kTwoByte; default false),
         --apply-cmvn true|false (default true: use DATA/cmvn.scp when there is one),
         --cmvn-opts '--norm-vars=true' (apply-cmvn options; default: means only)"
set -euo pipefail
cmd="nnet-queue local"
frames_per_eg=8
left_context=4
right_context=4
samples_per_iter=400000
num_utts_subset=300
num_targets=
srand=0
apply_cmvn=true
cmvn_opts=
nj=1
compress=false
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 2 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1
dir=$2
for f in "$data/feats.scp" "$data/targets.scp"; do
  [ -f "$f" ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
opts=(--frames-per-eg "$frames_per_eg" --left-context "$left_context" --right-context "$right_context"
      --samples-per-iter "$samples_per_iter" --num-utts-subset "$num_utts_subset" --srand "$srand"
      --compress "$compress")
[ -n "$num_targets" ] && opts+=(--num-targets "$num_targets")
case "$nj" in ''|*[!0-9]*|0) echo "$0: --nj must be a positive integer, got '$nj'" 1>&2; exit 1 ;; esac
nutt=$(wc -l < "$data/feats.scp")
[ "$nutt" -ge "$nj" ] || { echo "$0: --nj $nj is more than the $nutt utterances of $data/feats.scp" 1>&2; exit 1; }
case "$apply_cmvn" in true|false) ;; *) echo "$0: --apply-cmvn must be true or false" 1>&2; exit 1 ;; esac
if $apply_cmvn && [ -f "$data/cmvn.scp" ]; then
  [ -f "$data/utt2spk" ] || { echo "$0: $data/cmvn.scp needs $data/utt2spk" 1>&2; exit 1; }
  opts+=(--cmvn "scp:$data/cmvn.scp" --utt2spk "$data/utt2spk" --cmvn-opts "$cmvn_opts")
elif $apply_cmvn && [ -n "$cmvn_opts" ]; then
  echo "$0: --cmvn-opts given but there is no $data/cmvn.scp" 1>&2; exit 1
fi
mkdir -p "$dir/log"
rm -rf "$dir/orig"  # an earlier parallel run's pieces: their job summaries would not match this run's
if [ "$nj" -eq 1 ]; then
  $cmd "$dir/log/get_egs.log" nnet-get-egs "${opts[@]}" "scp:$data/feats.scp" "scp:$data/targets.scp" "$dir"
else
  # Kaldi's utils/split_scp.pl: N contiguous blocks of lines, sizes differing by at most one.
  split=$dir/split$nj
  rm -rf "$split"; mkdir -p "$split"
  trap 'rm -rf "$split"' EXIT  # also when a job fails
  awk -v n="$nj" -v total="$nutt" -v dir="$split" \
    '{ j = int((NR - 1) * n / total) + 1; print > (dir "/feats." j ".scp") }' "$data/feats.scp"
  $cmd JOB=1:$nj "$dir/log/get_egs.JOB.log" nnet-get-egs "${opts[@]}" --num-jobs "$nj" --job JOB \
    "scp:$split/feats.JOB.scp" "scp:$data/targets.scp" "$dir"
  num_archives=$(cat "$dir/orig/num_archives")
  $cmd ARCHIVE=1:$num_archives "$dir/log/shuffle.ARCHIVE.log" nnet-merge-egs "$dir" ARCHIVE
  $cmd "$dir/log/finish.log" nnet-merge-egs --finish "$dir"
fi
echo "$0: wrote $(cat "$dir/info/num_archives") archives of $(cat "$dir/info/egs_per_archive") egs to $dir (cmvn_opts: $(cat "$dir/cmvn_opts"))"
