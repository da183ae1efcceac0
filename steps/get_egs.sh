#!/usr/bin/env bash
# Dump shuffled training examples (egs) from a data dir: DATA/feats.scp + DATA/targets.scp
# (per-frame class ids) -> EGS_DIR/egs.*.ark, diagnostic and combine subsets, info/.
# With DATA/cmvn.scp (and DATA/utt2spk) the features get per-speaker CMVN first, as Kaldi's
# get_egs.sh does (apply-cmvn's defaults: means only); --apply-cmvn false turns it off.
# --online-cmvn or --global-cmvn: from the features' global statistics instead (see the options).
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
         --cmvn-opts '--norm-vars=true' (apply-cmvn options; default: means only),
         --online-cmvn true|false (default false: Kaldi's apply-cmvn-online instead of apply-cmvn),
         --global-cmvn true|false (default false: one global mean for all, what vosk applies);
           both use the features' global statistics, written to EGS_DIR/global_cmvn.stats"
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
online_cmvn=false
global_cmvn=false
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
for x in online_cmvn global_cmvn; do
  case "${!x}" in true|false) ;; *) echo "$0: --${x/_/-} must be true or false" 1>&2; exit 1 ;; esac
done
$online_cmvn && $global_cmvn && { echo "$0: give --online-cmvn true or --global-cmvn true, not both" 1>&2; exit 1; }
if $global_cmvn; then
  # apply-cmvn with one global matrix: the same mean taken from every frame of every utterance,
  # which is what vosk does with am/global_cmvn.stats (steps/make_vosk_model.sh).
  opts+=(--cmvn "$dir/global_cmvn.stats" --cmvn-opts "$cmvn_opts")
elif $online_cmvn; then
  # As Kaldi's get_egs.sh --online-cmvn true, but each utterance on its own (no --spk2utt): the
  # features an online decoder computes for a new stream, so the model sees what it was trained on.
  opts+=(--online-cmvn "$dir/global_cmvn.stats" --cmvn-opts "$cmvn_opts")
elif $apply_cmvn && [ -f "$data/cmvn.scp" ]; then
  [ -f "$data/utt2spk" ] || { echo "$0: $data/cmvn.scp needs $data/utt2spk" 1>&2; exit 1; }
  opts+=(--cmvn "scp:$data/cmvn.scp" --utt2spk "$data/utt2spk" --cmvn-opts "$cmvn_opts")
elif $apply_cmvn && [ -n "$cmvn_opts" ]; then
  echo "$0: --cmvn-opts given but there is no $data/cmvn.scp" 1>&2; exit 1
fi
# The egs dir's lock ($dir/get_egs.lock, as an exp dir's driver.lock), held for this shell ($$)
# until it exits: a second get_egs.sh on $dir is refused (rc 1, naming the holder) before it
# touches anything. The heartbeat keeps it fresh for one on another host; it waits on its sleep
# so that the TERM from the exit trap ends both at once.
nnet-egs-lock $$ "$dir"
split=
heartbeat() {
  trap '[ -z "${nap:-}" ] || { kill $nap; wait $nap; } 2>/dev/null || true; exit 0' TERM
  while kill -0 $$ 2>/dev/null; do touch -c "$dir/get_egs.lock"; sleep 60 & nap=$!; wait $nap; done
}
heartbeat </dev/null >/dev/null 2>&1 &
heartbeat_pid=$!
trap 'kill $heartbeat_pid 2>/dev/null; wait $heartbeat_pid 2>/dev/null || true; [ -z "$split" ] || rm -rf "$split"; nnet-egs-lock --release $$ "$dir"' EXIT
mkdir -p "$dir/log"
rm -rf "$dir/orig"  # an earlier parallel run's pieces: their job summaries would not match this run's
rm -f "$dir/online_cmvn" "$dir/global_cmvn.stats"   # made again below when this run has online or global CMVN
if $online_cmvn || $global_cmvn; then
  $cmd "$dir/log/global_cmvn.log" nnet-compute-cmvn-stats --binary false "scp:$data/feats.scp" "$dir/global_cmvn.stats"
fi
if [ "$nj" -eq 1 ]; then
  $cmd "$dir/log/get_egs.log" nnet-get-egs "${opts[@]}" --lock false "scp:$data/feats.scp" "scp:$data/targets.scp" "$dir"
else
  # Kaldi's utils/split_scp.pl: N contiguous blocks of lines, sizes differing by at most one.
  split=$dir/split$nj
  rm -rf "$split"; mkdir -p "$split"  # removed on exit (the trap above), also when a job fails
  awk -v n="$nj" -v total="$nutt" -v dir="$split" \
    '{ j = int((NR - 1) * n / total) + 1; print > (dir "/feats." j ".scp") }' "$data/feats.scp"
  $cmd JOB=1:$nj "$dir/log/get_egs.JOB.log" nnet-get-egs "${opts[@]}" --num-jobs "$nj" --job JOB \
    "scp:$split/feats.JOB.scp" "scp:$data/targets.scp" "$dir"
  num_archives=$(cat "$dir/orig/num_archives")
  $cmd ARCHIVE=1:$num_archives "$dir/log/shuffle.ARCHIVE.log" nnet-merge-egs "$dir" ARCHIVE
  $cmd "$dir/log/finish.log" nnet-merge-egs --finish "$dir"
fi
if $online_cmvn; then touch "$dir/online_cmvn"; fi   # Kaldi's marker: training copies it, decoding reads it
echo "$0: wrote $(cat "$dir/info/num_archives") archives of $(cat "$dir/info/egs_per_archive") egs to $dir (cmvn_opts: $(cat "$dir/cmvn_opts"))"
