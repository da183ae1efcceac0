#!/usr/bin/env bash
# Spoken digits: a Kaldi hybrid acoustic-model recipe from audio to WER, offline.
# espeak-ng connected digits -> MFCC + CMVN -> monophone GMM (kaldi-hmm-gmm) -> alignments ->
# pdf-id targets -> DNN on fbank trained by parallel NG-SGD jobs averaged every iteration ->
# log-likelihoods (log-posterior - log-prior) -> HCLG decoding -> WER, against the GMM baseline;
# then the DNN exported to a vosk model dir and decoded by vosk (Kaldi's C++ online decoder).
# Stages: 0 data; 1 features; 2 lang; 3 monophone GMM; 4 alignments, targets; 5 graph, GMM decode;
# 6 egs; 7 DNN with 1 job; 8 DNN with the 2 -> 4 jobs ramp; 9 DNN decodes; 10 vosk export and
# decode; 11 summary.
# Run from this directory:  ./run.sh [--stage N] [--stop-stage N] [--num-utts 1000]
# Your own data: put Kaldi data dirs in data/train and data/test and start at stage 1 (docs/speech.md).
set -euo pipefail
stage=0
stop_stage=11
num_utts=1000        # train + test; e.g. 50000 for a large run
num_speakers=50
nj=2
mono_iters=20        # Kaldi's train_mono.sh: 40 passes; 20 suffice at the default size
totgauss=600         # Kaldi: 1000
num_epochs=1
use_gpu=no
dnn_1job=true       # also train the 1-job baseline DNN
frames_per_eg=4
max_egs_per_archive=100000   # Kaldi: --samples-per-iter 400000
dnn_cmvn=global      # the DNN's CMVN: global (what vosk applies: stage 10), speaker or online
. ./cmd.sh
. ./path.sh
. utils/parse_options.sh
export PATH=$PWD/utils:$PATH
mkdir -p exp
times=exp/stage_times
if [ $stage -le 0 ] || [ ! -f $times ]; then : > $times; fi   # --stage N in a fresh dir starts it too
t0=$(date +%s)
stage_done() { local t=$(date +%s); sed -i "/^$1 /d" $times; echo "$1 $((t - t0))" >> $times; t0=$t; }
run_stage() { [ $stage -le $1 ] && [ $1 -le $stop_stage ]; }   # --stop-stage 5: up to the GMM decode

if run_stage 0; then
  command -v espeak-ng > /dev/null || { echo "$0: espeak-ng not found (apt-get install espeak-ng)" 1>&2; exit 1; }
  local/prepare_data.py --num-utts $num_utts --num-speakers $num_speakers data wav
  for x in train test; do
    $train_cmd JOB=1:$nj exp/synth/log/synth_$x.JOB.log \
      local/synth_wavs.py --job JOB --num-jobs $nj data/$x/synth.plan wav
  done
  stage_done data
fi

if run_stage 1; then
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

if run_stage 2; then
  nnet-prepare-lang --sil-prob 0.5 local/dict/lexicon.txt data/lang 2> exp/prepare_lang.log
  stage_done lang
fi

if run_stage 3; then
  steps/train_mono.sh --nj $nj --cmd "$train_cmd" --num-iters $mono_iters --totgauss $totgauss \
    --max-iter-inc $((mono_iters * 3 / 4)) --realign-iters "1 2 3 4 5 6 7 8 9 10 12 14 16 18" \
    data/train data/lang exp/mono
  stage_done mono
fi

if run_stage 4; then
  steps/align_si.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/mono exp/mono_ali
  # ali-to-pdf: the DNN's per-frame targets; their counts are the priors (Kaldi's default).
  $train_cmd exp/mono_ali/log/ali_to_pdf.log nnet-ali-to-pdf exp/mono_ali/final.mdl "ark:cat exp/mono_ali/ali.*.ark |" \
    ark,scp:$PWD/exp/mono_ali/pdf.ark,data/train_fbank/targets.scp
  num_pdfs=$(grep -o "[0-9]* pdfs" exp/mono/log/init.log | head -1 | awk '{print $1}')
  [ -n "$num_pdfs" ] || { echo "$0: no pdf count in exp/mono/log/init.log" 1>&2; exit 1; }
  $train_cmd exp/mono_ali/log/sum_pdf_counts.log nnet-sum-pdf-counts --counts-dim $num_pdfs --normalize false \
    scp:data/train_fbank/targets.scp exp/mono_ali/pdf_counts
  stage_done align
fi

if run_stage 5; then
  utils/mkgraph.sh data/lang exp/mono exp/mono/graph
  steps/decode.sh --nj $nj --cmd "$train_cmd" exp/mono/graph data/test exp/mono/decode_test
  stage_done gmm_decode
fi

if run_stage 6; then
  # The output layer: one output per pdf of the alignment model, whatever conf/model.yaml says.
  nnet-init --output-dim-from exp/mono_ali/final.mdl --write-config exp/model.yaml conf/model.yaml \
    exp/model_context.mdl 2> exp/model_init.log || { tail -1 exp/model_init.log 1>&2; exit 1; }
  num_pdfs=$(tr -d '[]' < exp/mono_ali/pdf_counts | wc -w)
  # The egs carry the model's context (nnet3-info's left-context / right-context).
  left=$(nnet-info exp/model_context.mdl 2> /dev/null | awk '/^left-context/ {print $2}')
  right=$(nnet-info exp/model_context.mdl 2> /dev/null | awk '/^right-context/ {print $2}')
  rm exp/model_context.mdl
  # Diagnostic subsets of 100 utterances (Kaldi: 300), fewer on a small corpus.
  ntrain=$(wc -l < data/train_fbank/targets.scp)
  subset=$(( ntrain / 5 < 100 ? ntrain / 5 : 100 ))
  # At least num-jobs-final (4) archives, and no more than $max_egs_per_archive egs in one.
  frames=$(tr -d '[]' < exp/mono_ali/pdf_counts | awk '{ for (i = 1; i <= NF; i++) t += $i - 1 } END { print t }')
  samples_per_iter=$(awk -v f=$frames -v e=$frames_per_eg -v m=$max_egs_per_archive \
    'BEGIN { a = int(f / e / m) + 1; if (a < 4) a = 4; print int(f / e / a) + 10 }')
  case $dnn_cmvn in
    global) cmvn=(--global-cmvn true) ;; online) cmvn=(--online-cmvn true) ;; speaker) cmvn=() ;;
    *) echo "$0: --dnn-cmvn must be global, speaker or online, got '$dnn_cmvn'" 1>&2; exit 1 ;;
  esac
  steps/get_egs.sh --cmd "$train_cmd" --frames-per-eg $frames_per_eg --left-context $left --right-context $right \
    --samples-per-iter $samples_per_iter --num-utts-subset $subset --num-targets $num_pdfs "${cmvn[@]}" \
    data/train_fbank exp/egs
  stage_done egs
fi

train_dnn() {  # <dir> <jobs-initial> <jobs-final>
  steps/train_dnn.py --cmd "$train_cmd" --use-gpu $use_gpu --config exp/model.yaml \
    --trainer.num-epochs $num_epochs \
    --trainer.optimization.num-jobs-initial $2 --trainer.optimization.num-jobs-final $3 \
    --trainer.optimization.initial-effective-lrate 0.003 --trainer.optimization.final-effective-lrate 0.0003 \
    --trainer.optimization.minibatch-size 256,128 --egs.dir exp/egs --dir $1
  # Priors from the alignments' pdf counts, stored in the model: nnet-compute then writes
  # log-likelihoods = log-posterior - log-prior.
  $train_cmd $1/log/adjust_priors.log nnet-adjust-priors $1/final.mdl exp/mono_ali/pdf_counts $1/final.mdl
}
if run_stage 7 && $dnn_1job; then
  train_dnn exp/nnet_1job 1 1
  stage_done dnn_1job
fi
if run_stage 8; then
  train_dnn exp/nnet 2 4
  stage_done dnn_ramp
fi

if run_stage 9; then
  for d in exp/nnet_1job exp/nnet; do
    [ -f $d/final.mdl ] || continue
    steps/decode.sh --nj $nj --cmd "$train_cmd" --nnet $d/final.mdl --cmvn-opts "$(cat exp/egs/cmvn_opts)" \
      --trans-model exp/mono_ali/final.mdl exp/mono/graph data/test_fbank $d/decode_test
  done
  stage_done dnn_decode
fi

if run_stage 10; then
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
  for x in exp/*/decode*; do [ -d $x ] && grep -H WER $x/wer_* | utils/best_wer.sh; done
  echo
  printf "%-28s %s\n" "system" "WER"
  printf "%-28s %s\n" "GMM (monophone)" "$(grep -o '%WER [0-9.]*' exp/mono/decode_test/wer_10 | awk '{print $2}')"
  $dnn_1job && printf "%-28s %s\n" "DNN, 1 job" "$(grep -o '%WER [0-9.]*' exp/nnet_1job/decode_test/wer_10 | awk '{print $2}')"
  printf "%-28s %s\n" "DNN, 2 -> 4 jobs averaged" "$(grep -o '%WER [0-9.]*' exp/nnet/decode_test/wer_10 | awk '{print $2}')"
  [ -f exp/nnet/decode_test_vosk/wer_10 ] &&
    printf "%-28s %s\n" "  the same, decoded by vosk" "$(grep -o '%WER [0-9.]*' exp/nnet/decode_test_vosk/wer_10 | awk '{print $2}')"
  echo
  echo "Stage wall times (s):"
  awk '{ printf "  %-12s %5d\n", $1, $2; t += $2 } END { printf "  %-12s %5d\n", "total", t }' $times
fi
