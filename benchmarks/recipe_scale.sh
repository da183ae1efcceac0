#!/usr/bin/env bash
# Issue 31's scale check: recipes/spoken_digits end to end at two sizes through a cluster queue,
# each in a copy of its own under OUT (OUT/recipes/sd<N>, steps/ and utils/ linked to this
# checkout's), then benchmarks/stage_costs.py sets the two runs' stage tables side by side
# (wall, peak memory, cost per frame, large over small). Each run's output, with GNU time's
# summary of the whole run, is in OUT/recipes/sd<N>/run.log. Rerunning goes on where a run
# stopped (the recipe skips stages whose outputs are complete).
#
#   benchmarks/recipe_scale.sh [--sizes "5000 50000"] [--cmd "nnet-queue slurm --mem 2G"] [--nj 8]
#                              [--recipe-opts "--dnn-1job false"] OUT
#   e.g. benchmarks/recipe_scale.sh /data/scale      (the single-node Slurm: tests/cluster/start-slurm.sh)
set -euo pipefail
sizes="5000 50000"
cmd="nnet-queue slurm --mem 2G"
nj=8
utts_per_speaker=125
recipe_opts=         # more options for run.sh, e.g. "--dnn-1job false" (no 1-job baseline DNN)
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/steps/parse_options.sh"
[ $# -eq 1 ] || { sed -n '9,11p' "$0" | sed 's/^# *//' 1>&2; exit 1; }
out=$1
mkdir -p "$out/recipes"
for d in steps utils; do ln -sfn "$repo/$d" "$out/$d"; done
for n in $sizes; do
  dir=$out/recipes/sd$n
  if [ ! -d $dir ]; then
    mkdir -p $dir
    cp -a "$repo/recipes/spoken_digits/." $dir/
    rm -rf $dir/data $dir/exp $dir/wav $dir/mfcc $dir/fbank   # a copy of the recipe, not of a run
  fi
  echo "$0: $n utterances in $dir ($cmd)"
  (cd $dir && train_cmd="$cmd" /usr/bin/time -v ./run.sh --num-utts $n \
    --num-speakers $(( n / utts_per_speaker )) --nj $nj $recipe_opts) >> $dir/run.log 2>&1 ||
    { echo "$0: the run of $n utterances failed: see $dir/run.log" 1>&2; tail -3 $dir/run.log 1>&2; exit 1; }
  sed -n '/^system/,/^$/p' $dir/run.log
done
set -- $sizes   # the first size against the last
[ $# -lt 2 ] || python3 "$repo/benchmarks/stage_costs.py" $out/recipes/sd$1 $out/recipes/sd${!#}
