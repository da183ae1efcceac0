#!/usr/bin/env bash
# Spoken digits: a Kaldi hybrid acoustic-model recipe from audio to WER, offline.
# espeak-ng connected digits -> MFCC + CMVN -> monophone GMM (kaldi-hmm-gmm) -> alignments ->
# pdf-id targets -> DNN on fbank trained by parallel NG-SGD jobs averaged every iteration ->
# log-likelihoods (log-posterior - log-prior) -> HCLG lattices -> WER over Kaldi's LM-weight and
# word-insertion-penalty sweep (local/score.sh), against the GMM baseline;
# then the DNN exported to a vosk model dir and decoded by vosk (Kaldi's C++ online decoder).
# Stages: 0 data; 1 features; 2 lang; 3 monophone GMM; 4 alignments; 5 graph, GMM decode;
# 6 targets and egs; 7 DNN with 1 job; 8 DNN with the 2 -> 4 jobs ramp; 9 DNN decodes; 10 vosk export and
# decode; 11 summary.
# Run from this directory:  ./run.sh [--stage N] [--stop-stage N] [--num-utts 1000]
# Without --stage, stages whose outputs are complete are skipped (steps/stages.sh): re-running
# ./run.sh after a failure goes on where it stopped.
# Your own data: put Kaldi data dirs in data/train and data/test and start at stage 1 (docs/speech.md).
set -euo pipefail
stage=
stop_stage=11
num_utts=1000        # train + test; e.g. 50000 for a large run
num_speakers=50
nj=2
mono_iters=20        # Kaldi's train_mono.sh: 40 passes; 20 suffice at the default size
totgauss=600         # Kaldi: 1000
num_epochs=1
use_gpu=no
dnn_1job=true       # also train the 1-job baseline DNN
frames_per_eg=8      # Kaldi nnet3's, for its TDNNs; each job trains on every frame of each eg
max_egs_per_archive=100000   # Kaldi: --samples-per-iter 400000
min_archives=16      # at least this many archives (an epoch's iterations at 1 job)
dnn_cmvn=global      # the DNN's CMVN: global (what vosk applies: stage 10), speaker or online
. ./cmd.sh
. ./path.sh
. utils/parse_options.sh
export PATH=$PWD/utils:$PATH
. steps/stages.sh   # run_stage, stage_done (exp/stage_times: wall and peak memory per stage)

if run_stage 0 data/local/synthesised; then
  command -v espeak-ng > /dev/null || { echo "$0: espeak-ng not found (apt-get install espeak-ng)" 1>&2; exit 1; }
  local/prepare_data.py --num-utts $num_utts --num-speakers $num_speakers data wav
  for x in train test; do
    $train_cmd JOB=1:$nj exp/synth/log/synth_$x.JOB.log \
      local/synth_wavs.py --job JOB --num-jobs $nj data/$x/synth.plan wav
  done
  mkdir -p data/local && touch data/local/synthesised
  stage_done data
fi

if run_stage 1 data/test_fbank/cmvn.scp; then
  for x in train test; do
    steps/make_feats.sh --feat-type mfcc --conf conf/mfcc.conf --nj $nj --cmd "$train_cmd" data/$x exp/make_mfcc/$x mfcc
    steps/compute_cmvn_stats.sh data/$x exp/make_mfcc/$x mfcc
    # The DNN's data dir: 40 fbank + per-speaker CMVN stats (get_egs and nnet-compute apply them).
    mkdir -p data/${x}_fbank
    cp data/$x/{wav.scp,text,utt2spk,spk2utt} data/${x}_fbank/
    [ -f data/$x/segments ] && cp data/$x/segments data/${x}_fbank/
    steps/make_feats.sh --feat-type fbank --conf conf/fbank.conf --nj $nj --cmd "$train_cmd" data/${x}_fbank exp/make_fbank/$x fbank
    steps/compute_cmvn_stats.sh data/${x}_fbank exp/make_fbank/$x fbank
  done
  stage_done features
fi

if run_stage 2 data/lang/G.fst; then
  nnet-prepare-lang --sil-prob 0.5 local/dict/lexicon.txt data/lang 2> exp/prepare_lang.log
  stage_done lang
fi

if run_stage 3 exp/mono/final.mdl; then
  steps/train_mono.sh --nj $nj --cmd "$train_cmd" --num-iters $mono_iters --totgauss $totgauss \
    --max-iter-inc $((mono_iters * 3 / 4)) --realign-iters "1 2 3 4 5 6 7 8 9 10 12 14 16 18" \
    data/train data/lang exp/mono
  stage_done mono
fi

if run_stage 4 exp/mono_ali/pdf_counts; then
  steps/align_si.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/mono exp/mono_ali
  stage_done align
fi

if run_stage 5 exp/mono/decode_test/scoring_kaldi/wer_details/wip; then
  utils/mkgraph.sh data/lang exp/mono exp/mono/graph
  steps/decode.sh --nj $nj --cmd "$train_cmd" exp/mono/graph data/test exp/mono/decode_test
  stage_done gmm_decode
fi

if run_stage 6 exp/egs/info/num_archives; then
  # pdf-id targets and counts from the alignments, the config with their pdf count, the egs.
  steps/make_dnn_egs.sh --cmd "$train_cmd" --frames-per-eg $frames_per_eg --max-egs-per-archive $max_egs_per_archive \
    --min-archives $min_archives --dnn-cmvn $dnn_cmvn conf/model.yaml exp/mono_ali data/train_fbank exp
  stage_done egs
fi

train_dnn() {  # <dir> <jobs-initial> <jobs-final>
  steps/train_hybrid_dnn.sh --cmd "$train_cmd" --use-gpu $use_gpu --num-epochs $num_epochs --jobs $2:$3 \
    exp/model.yaml exp/egs exp/mono_ali $1
}
if $dnn_1job && run_stage 7 exp/nnet_1job/final.mdl; then
  train_dnn exp/nnet_1job 1 1
  stage_done dnn_1job
fi
if run_stage 8 exp/nnet/final.mdl; then
  train_dnn exp/nnet 2 4
  stage_done dnn_ramp
fi

if run_stage 9 exp/nnet/decode_test/scoring_kaldi/wer_details/wip; then
  for d in exp/nnet_1job exp/nnet; do
    [ -f $d/final.mdl ] || continue
    steps/decode.sh --nj $nj --cmd "$train_cmd" --nnet $d/final.mdl --cmvn-opts "$(cat exp/egs/cmvn_opts)" \
      --trans-model exp/mono_ali/final.mdl exp/mono/graph data/test_fbank $d/decode_test
  done
  stage_done dnn_decode
fi

if run_stage 10 exp/nnet/decode_test_vosk/wer_10_0.0; then
  # vosk decodes the test wavs itself (features, CMVN, Kaldi's decoder): the exported model is
  # checked against our decoder's WER. Of the DNN's CMVN choices it reproduces only the global.
  if [ -f exp/nnet/global_cmvn.stats ] && [ ! -f exp/nnet/online_cmvn ]; then
    steps/make_vosk_model.sh --feat-type fbank --feat-conf conf/fbank.conf \
      data/lang exp/mono/graph exp/mono_ali/final.mdl exp/nnet exp/nnet/vosk_model
    steps/decode_vosk.sh --nj $nj --cmd "$train_cmd" exp/nnet/vosk_model data/test exp/nnet/decode_test_vosk
  else
    echo "$0: no vosk model: exp/nnet was trained on $dnn_cmvn CMVN, which vosk does not reproduce"
  fi
  stage_done vosk
fi

if run_stage 11; then
  echo "Best WERs (held-out speakers):"
  for x in exp/*/decode*; do [ -d $x ] && grep WER $x/wer_* /dev/null | utils/best_wer.sh; done
  echo
  # WER at LM weight 10 (1 / acoustic scale, the decoder's own objective: what vosk's best path
  # is scored at) and penalty 0.0; and the best of scoring's LMWT x penalty sweep (tuned on the test set).
  wer_of() { grep -o '%WER [0-9.]*' $1 | awk '{print $2}'; }
  best_of() { awk '{ n = split($NF, f, "_"); printf "%s (LMWT %s, penalty %s)", $2, f[n-1], f[n] }' $1/scoring_kaldi/best_wer; }
  row() { printf "%-28s %-9s %s\n" "$1" "$(wer_of $2/wer_10_0.0)" "$(best_of $2)"; }
  printf "%-28s %-9s %s\n" "system" "WER" "best WER"
  row "GMM (monophone)" exp/mono/decode_test
  $dnn_1job && row "DNN, 1 job" exp/nnet_1job/decode_test
  row "DNN, 2 -> 4 jobs averaged" exp/nnet/decode_test
  [ -f exp/nnet/decode_test_vosk/wer_10_0.0 ] && row "  the same, decoded by vosk" exp/nnet/decode_test_vosk
  echo
  print_stage_times
fi
