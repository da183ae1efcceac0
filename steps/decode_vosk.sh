#!/usr/bin/env bash
# Decode a data dir's audio with vosk (Kaldi's online2 nnet3 decoder) over a vosk model dir
# (steps/make_vosk_model.sh): vosk makes the features and online CMVN from the wavs itself.
# Word-ids as steps/decode.sh --one-best writes them, then the same scoring (local/score.sh): vosk
# gives its best path only, so one setting, LMWT 10 (its acoustic scale 0.1) and penalty 0.0:
# DECODE_DIR/wer_10_0.0, to set beside our lattice decode's wer_10_0.0 (the same objective).
help_message="Usage: steps/decode_vosk.sh [options] <vosk-dir> <data-dir> <decode-dir>
 e.g.: steps/decode_vosk.sh --nj 2 --cmd \"\$train_cmd\" exp/nnet/vosk_model data/test exp/nnet/decode_test_vosk
Options: --nj (4), --cmd"
set -euo pipefail
cmd="nnet-queue local"
nj=4
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
model=$1; data=$2; dir=$3
for f in $model/am/final.mdl $model/graph/HCLG.fst $model/graph/words.txt $data/wav.scp; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
[ -f $data/segments ] && { echo "$0: $data/segments: vosk decodes whole recordings; cut the segments to wavs first" 1>&2; exit 1; }
utils/validate_data_dir.sh --no-feats $([ -f $data/text ] || echo --no-text) --lang $model/graph $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
# An earlier decode's files here (lattices, more jobs' words) would be scored with these.
rm -f $dir/lat.*.gz $dir/words.*.txt
$cmd JOB=1:$nj $dir/log/decode.JOB.log \
  nnet-decode-vosk $model scp:$data/split$nj/JOB/wav.scp ark,t:$dir/words.JOB.txt
local/score.sh --cmd "$cmd" $data $model/graph $dir
