#!/usr/bin/env bash
# A hybrid DNN: steps/train_dnn.py on the egs of steps/make_dnn_egs.sh, then the priors from the
# alignments' pdf counts stored in the model, so nnet-compute writes log-likelihoods
# (log-posterior - log-prior). Options after the known ones go to train_dnn.py as they are.
help_message="Usage: steps/train_hybrid_dnn.sh [options] [-- train_dnn.py options] <model-config> <egs-dir> <ali-dir> <dir>
 e.g.: steps/train_hybrid_dnn.sh --cmd \"\$train_cmd\" --jobs 2:4 exp/model.yaml exp/egs exp/tri2_ali exp/nnet
Options: --cmd, --use-gpu (no), --jobs initial:final (1:1), --num-epochs (1), --lrates initial:final (0.003:0.0003),
         --minibatch-size (32,16: egs of 8 frames, chunk training)"
set -euo pipefail
cmd="nnet-queue local"
use_gpu=no
jobs=1:1
num_epochs=1
lrates=0.003:0.0003
minibatch_size=32,16   # 256 frames at frames-per-eg 8: 64,32 gave 1.34 % WER on spoken_digits, 32,16 1.10
. "$(dirname "$0")/parse_options.sh"
extra=()
if [ "${1:-}" = "--" ]; then shift; while [ $# -gt 4 ]; do extra+=("$1"); shift; done; fi
[ $# -eq 4 ] || { echo "$help_message" 1>&2; exit 1; }
config=$1; egs=$2; alidir=$3; dir=$4
[ -f $alidir/pdf_counts ] || { echo "$0: expected file $alidir/pdf_counts (steps/make_dnn_egs.sh writes it)" 1>&2; exit 1; }
steps/train_dnn.py --cmd "$cmd" --use-gpu $use_gpu --config $config --trainer.num-epochs $num_epochs \
  --trainer.optimization.num-jobs-initial ${jobs%:*} --trainer.optimization.num-jobs-final ${jobs#*:} \
  --trainer.optimization.initial-effective-lrate ${lrates%:*} --trainer.optimization.final-effective-lrate ${lrates#*:} \
  --trainer.optimization.minibatch-size $minibatch_size "${extra[@]}" --egs.dir $egs --dir $dir
$cmd $dir/log/adjust_priors.log nnet-adjust-priors $dir/final.mdl $alidir/pdf_counts $dir/final.mdl
