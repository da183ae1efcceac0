#!/usr/bin/env bash
# Fashion-MNIST (60k/10k images, 784 pixels, 10 classes) with partition pre-training (Miranda &
# Von Zuben 2015): the MLP is split into k narrow sub-models trained independently, merged, and
# the merged model trained as usual; the same MLP trained from scratch is the baseline.
# Stages: 0 data dirs; 1 egs; 2 baseline; 3 partitioned training; 4 test-set accuracy of both.
# Data: Debian/Ubuntu 'apt-get install dataset-fashion-mnist', or --idx-dir DIR holding the four
# MNIST-format IDX files (MNIST itself works). Run from this directory:  ./run.sh [--stage N]
set -euo pipefail
stage=                 # empty: skip stages whose outputs are complete; N: run N and later
idx_dir=/usr/share/datasets/fashion-mnist
model=mlp4             # conf/mlp3.yaml (~430k parameters) or conf/mlp4.yaml (~2.1M)
num_submodels=2
num_epochs=4           # baseline
sub_num_epochs=3       # each sub-model
merged_num_epochs=1    # the merged model
baseline=true
use_gpu=no
. ./cmd.sh
. ./path.sh
. steps/parse_options.sh
. steps/stages.sh
exp=exp/$model
train_opts=(--use-gpu $use_gpu --trainer.optimization.minibatch-size 512
            --trainer.optimization.num-jobs-initial 1 --trainer.optimization.num-jobs-final 1)

if run_stage 0 data/train/utt2spk data/test/utt2spk; then
  local/prepare_data.py --idx-dir $idx_dir data
fi

if run_stage 1 exp/egs/info/num_archives; then
  # One-frame utterances, no context; 2 archives of ~30k images; 1000 images held out for diagnostics.
  steps/get_egs.sh --cmd "$train_cmd" --frames-per-eg 1 --left-context 0 --right-context 0 \
    --samples-per-iter 30000 --num-utts-subset 1000 --num-targets 10 data/train exp/egs
fi

if [ $baseline = true ] && run_stage 2 $exp/baseline/final.mdl $exp/baseline/accuracy.report; then
  steps/train_dnn.py --cmd "$train_cmd" --config conf/$model.yaml "${train_opts[@]}" \
    --trainer.num-epochs $num_epochs --trainer.optimization.initial-effective-lrate 0.004 \
    --trainer.optimization.final-effective-lrate 0.0004 --egs.dir exp/egs --dir $exp/baseline
fi

if run_stage 3 $exp/part$num_submodels/final.mdl $exp/part$num_submodels/accuracy.report; then
  steps/train_partitioned.py --cmd "$train_cmd" --num-submodels $num_submodels "${train_opts[@]}" \
    --sub.num-epochs $sub_num_epochs --sub.initial-effective-lrate 0.004 --sub.final-effective-lrate 0.0004 \
    --trainer.num-epochs $merged_num_epochs --trainer.optimization.initial-effective-lrate 0.001 \
    --trainer.optimization.final-effective-lrate 0.0001 conf/$model.yaml exp/egs $exp/part$num_submodels
fi

if run_stage 4; then
  for dir in $exp/baseline $exp/part$num_submodels; do
    [ -f $dir/final.mdl ] || continue
    $train_cmd $dir/log/compute_prob_test.log \
      nnet-compute-prob $dir/final.mdl scp:data/test/feats.scp scp:data/test/targets.scp
    echo "$dir test accuracy: $(grep -o "Overall accuracy for 'output' is [0-9.e-]*" $dir/log/compute_prob_test.log | awk '{print $NF}')"
  done
fi
