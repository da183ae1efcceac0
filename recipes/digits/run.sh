#!/usr/bin/env bash
# Digits: the embedded end-to-end recipe on scikit-learn's bundled 8x8 digits (no network).
# Stages: 0 data dirs; 1 egs; 2 training (2 -> 4 parallel jobs, averaged every iteration) and
# final combination; 3 test-set accuracy.   Run from this directory:  ./run.sh [--stage N]
# Without --stage, stages whose outputs are complete are skipped (steps/stages.sh).
set -euo pipefail
stage=
train_stage=          # empty: the driver goes on where exp/nnet left off; -1 starts it over
use_gpu=no
num_epochs=10
dir=exp/nnet
. ./cmd.sh
. ./path.sh
. steps/parse_options.sh
. steps/stages.sh

if run_stage 0 data/train/utt2spk data/test/utt2spk; then
  local/prepare_data.py --seed 0 data
fi

if run_stage 1 $dir/egs/info/num_archives; then
  # One-frame utterances: one label per eg, no context. 200-utt diagnostic subsets (Kaldi: 300).
  steps/get_egs.sh --cmd "$train_cmd" --frames-per-eg 1 --left-context 0 --right-context 0 \
    --samples-per-iter 400 --num-utts-subset 200 --num-targets 10 data/train $dir/egs
fi

if run_stage 2 $dir/final.mdl $dir/accuracy.report; then
  steps/train_dnn.py --cmd "$train_cmd" ${train_stage:+--stage $train_stage} --use-gpu $use_gpu \
    --config conf/model.yaml --trainer.num-epochs $num_epochs \
    --trainer.optimization.num-jobs-initial 2 --trainer.optimization.num-jobs-final 4 \
    --trainer.optimization.initial-effective-lrate 0.003 --trainer.optimization.final-effective-lrate 0.0003 \
    --trainer.optimization.minibatch-size 64,32 --egs.dir $dir/egs --dir $dir
fi

if run_stage 3; then
  $train_cmd $dir/log/compute_prob_test.log \
    nnet-compute-prob $dir/final.mdl scp:data/test/feats.scp scp:data/test/targets.scp
  grep -o "Overall accuracy.*" $dir/log/compute_prob_test.log
  echo "Test accuracy: $(grep -o "Overall accuracy for 'output' is [0-9.e-]*" $dir/log/compute_prob_test.log | awk '{print $NF}')"
fi
