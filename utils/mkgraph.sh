#!/usr/bin/env bash
# Kaldi's utils/mkgraph.sh: LANG + model -> GRAPH_DIR/HCLG.fst (+ words.txt, phones.txt and, as
# Kaldi's, the lang's phones/ sets: decoding and scoring read silence.csl and word_boundary.int).
set -euo pipefail
self_loop_scale=0.1
transition_scale=1.0
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "Usage: utils/mkgraph.sh [--self-loop-scale 0.1] <lang-dir> <model-dir> <graph-dir>
 e.g.: utils/mkgraph.sh data/lang exp/mono exp/mono/graph" 1>&2; exit 1; }
lang=$1; model=$2/final.mdl; dir=$3
for f in $lang/L_disambig.fst $lang/G.fst $model; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
mkdir -p $dir
nnet-mkgraph --self-loop-scale $self_loop_scale --transition-scale $transition_scale $lang $model $dir 2> $dir/mkgraph.log || {
  echo "$0: failed, see $dir/mkgraph.log" 1>&2; tail -1 $dir/mkgraph.log 1>&2; exit 1; }
rm -rf $dir/phones
cp -r $lang/phones $dir/
grep -o "Wrote .*" $dir/mkgraph.log
