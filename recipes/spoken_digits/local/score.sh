#!/usr/bin/env bash
# Score a decode dir: DECODE_DIR/words.*.txt (word-ids) -> scoring/<lmwt>.txt -> wer_<lmwt>, in
# Kaldi's compute-wer format. A best-path decode has one LM weight: 1/acoustic-scale (10).
set -euo pipefail
[ $# -eq 3 ] || { echo "Usage: local/score.sh <data-dir> <graph-dir> <decode-dir>" 1>&2; exit 1; }
data=$1; graph=$2; dir=$3
lmwt=10
mkdir -p $dir/scoring
utils/atomic_write.sh $dir/scoring/$lmwt.txt bash -o pipefail -c "cat $dir/words.*.txt | utils/int2sym.sh $graph/words.txt | sort"
utils/atomic_write.sh $dir/wer_$lmwt nnet-compute-wer --mode present $data/text $dir/scoring/$lmwt.txt \
  2> $dir/scoring/log.$lmwt || { echo "$0: scoring failed, see $dir/scoring/log.$lmwt" 1>&2
  tail -1 $dir/scoring/log.$lmwt 1>&2; exit 1; }
