#!/usr/bin/env bash
# Spoken commands: a ~1000-word task in the spirit of Kaldi's RM (Resource Management), offline.
# An RM-like template grammar (naval queries, "show the frigates in the gulf of mexico", beside
# assistant commands, "set the alarm for seven thirty": 993 words) -> espeak-ng speakers ->
# MFCC + fbank with CMVN; an espeak-ng lexicon, a lang dir with word-position-dependent phones,
# a trigram LM on the training transcripts and its G.fst (data/lang_test), and, as Kaldi's RM
# decodes with its word-pair grammar and with a unigram (graph_ug), a unigram (data/lang_test_ug).
# Train and test are split by speaker and by sentence: no test sentence is a training sentence,
# and some test words never occur in the training text (the LM gives them <UNK>'s probability).
# Then Kaldi's ladder, each model decoded with both LMs into lattices scored over LM weights
# (decode_test, decode_test_ug):
# monophone, tri1 (deltas), tri2 (LDA+MLLT), tri3 (SAT, fMLLR), and a TDNN on tri3's alignments
# trained by 1 job and by 2 -> 4 NG-SGD jobs averaged.
# Stages: 0 data (plan + synthesis); 1 features; 2 dict, lang, LM, G.fst; 3 mono; 4 tri1;
# 5 tri2; 6 tri3; 7 egs; 8 DNN, 1 job; 9 DNN, 2 -> 4 jobs; 10 DNN decodes; 11 summary.
# Run from this directory:  ./run.sh [--stage N] [--stop-stage N] [--num-utts 2000]
set -euo pipefail
stage=0
stop_stage=11
num_utts=2000        # train + test (~3.2 s each: 1.8 hours of audio); RM's training set has 3990
num_speakers=100     # 80 train, 20 test
seed=0
nj=2
lm_order=3
leaves=300           # tri1-3 tree leaves and Gaussians (Kaldi's RM: 1800 and 9000, 3990 utterances).
gauss=2000           # 1000 and 6000 overfit the training voices: tri1 6.15 % WER (mono 4.19), 0.0 on train
num_epochs=2
use_gpu=no
. ./cmd.sh
. ./path.sh
. utils/parse_options.sh
export PATH=$PWD/utils:$PATH
. steps/stages.sh   # run_stage, stage_done (exp/stage_times: wall and peak memory per stage)
logged() {  # <log> <command...>: stderr to the log; on failure, say where and its last line
  local log=$1; shift
  "$@" 2> $log || { echo "$0: $1 failed (see $log):" 1>&2; tail -1 $log 1>&2; exit 1; }
}

if run_stage 0; then
  command -v espeak-ng > /dev/null || { echo "$0: espeak-ng not found (apt-get install espeak-ng)" 1>&2; exit 1; }
  local/prepare_data.py --num-utts $num_utts --num-speakers $num_speakers --seed $seed data wav
  for x in train test; do
    $train_cmd JOB=1:$nj exp/synth/log/synth_$x.JOB.log \
      local/synth_wavs.py --job JOB --num-jobs $nj data/$x/synth.plan wav
    utils/validate_data_dir.sh --no-feats data/$x
  done
  stage_done data
fi

if run_stage 1; then
  for x in train test; do
    steps/make_feats.sh --feat-type mfcc --conf conf/mfcc.conf --nj $nj --cmd "$train_cmd" data/$x exp/make_mfcc/$x mfcc
    steps/compute_cmvn_stats.sh data/$x exp/make_mfcc/$x mfcc
    # The DNN's data dir: 40 fbank + per-speaker CMVN stats.
    mkdir -p data/${x}_fbank
    cp data/$x/{wav.scp,text,utt2spk,spk2utt} data/${x}_fbank/
    [ -f data/$x/segments ] && cp data/$x/segments data/${x}_fbank/
    steps/make_feats.sh --feat-type fbank --conf conf/fbank.conf --nj $nj --cmd "$train_cmd" data/${x}_fbank exp/make_fbank/$x fbank
    steps/compute_cmvn_stats.sh data/${x}_fbank exp/make_fbank/$x fbank
  done
  stage_done features
fi

if run_stage 2; then
  mkdir -p exp/lang
  # Kaldi's local/*_prepare_dict.sh: pronunciations from espeak-ng's en rules for every word of
  # the grammar, plus '!SIL SIL' and '<UNK> SPN'.
  logged exp/lang/prepare_dict.log nnet-prepare-dict --sentences data/train/text data/local/vocab.txt data/local/dict
  # utils/prepare_lang.sh: word-position-dependent phones (Kaldi's default).
  logged exp/lang/prepare_lang.log nnet-prepare-lang data/local/dict "<UNK>" data/local/lang data/lang
  utils/validate_data_dir.sh --no-feats --lang data/lang data/train
  # The LM: the training transcripts only (words outside the lexicon, if any, become <UNK>).
  mkdir -p data/local/lm
  logged exp/lang/train_lm.log nnet-train-lm --order $lm_order --lang data/lang data/train/text data/local/lm/lm.arpa
  logged exp/lang/compute_ppl.log nnet-compute-ppl data/local/lm/lm.arpa data/test/text > data/local/lm/ppl_test
  # utils/format_lm.sh: data/lang_test = data/lang + G.fst.
  logged exp/lang/format_lm.log nnet-format-lm data/lang data/local/lm/lm.arpa data/lang_test
  # The unigram: the acoustic models' differences show more where the LM constrains less.
  logged exp/lang/train_lm_ug.log nnet-train-lm --order 1 --lang data/lang data/train/text data/local/lm/lm_ug.arpa
  logged exp/lang/compute_ppl_ug.log nnet-compute-ppl data/local/lm/lm_ug.arpa data/test/text > data/local/lm/ppl_test_ug
  logged exp/lang/format_lm_ug.log nnet-format-lm data/lang data/local/lm/lm_ug.arpa data/lang_test_ug
  grep -h "Wrote" exp/lang/*.log | sed 's/^LOG ([^)]*) //'
  cat data/local/lm/ppl_test data/local/lm/ppl_test_ug
  stage_done lang
fi

# <decode-script> <model-dir> [options]: graph and decode with the trigram, then the unigram.
graph_and_decode() {
  local script=$1 dir=$2; shift 2
  for lm in "" _ug; do
    utils/mkgraph.sh data/lang_test$lm $dir $dir/graph$lm
    $script --nj $nj --cmd "$train_cmd" "$@" $dir/graph$lm data/test $dir/decode_test$lm
  done
}

if run_stage 3; then
  steps/train_mono.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/mono
  graph_and_decode steps/decode.sh exp/mono
  steps/align_si.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/mono exp/mono_ali
  stage_done mono
fi
if run_stage 4; then
  steps/train_deltas.sh --cmd "$train_cmd" $leaves $gauss data/train data/lang exp/mono_ali exp/tri1
  graph_and_decode steps/decode.sh exp/tri1
  steps/align_si.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/tri1 exp/tri1_ali
  stage_done tri1
fi
if run_stage 5; then
  steps/train_lda_mllt.sh --cmd "$train_cmd" $leaves $gauss data/train data/lang exp/tri1_ali exp/tri2
  graph_and_decode steps/decode.sh exp/tri2
  steps/align_si.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/tri2 exp/tri2_ali
  stage_done tri2
fi
if run_stage 6; then
  steps/train_sat.sh --cmd "$train_cmd" $leaves $gauss data/train data/lang exp/tri2_ali exp/tri3
  graph_and_decode steps/decode_fmllr.sh exp/tri3
  steps/align_fmllr.sh --nj $nj --cmd "$train_cmd" data/train data/lang exp/tri3 exp/tri3_ali
  stage_done tri3
fi
if run_stage 7; then
  steps/make_dnn_egs.sh --cmd "$train_cmd" conf/model.yaml exp/tri3_ali data/train_fbank exp
  stage_done egs
fi
if run_stage 8; then
  steps/train_hybrid_dnn.sh --cmd "$train_cmd" --use-gpu $use_gpu --num-epochs $num_epochs --jobs 1:1 \
    exp/model.yaml exp/egs exp/tri3_ali exp/nnet_1job
  stage_done dnn_1job
fi
if run_stage 9; then
  steps/train_hybrid_dnn.sh --cmd "$train_cmd" --use-gpu $use_gpu --num-epochs $num_epochs --jobs 2:4 \
    exp/model.yaml exp/egs exp/tri3_ali exp/nnet
  stage_done dnn_ramp
fi
if run_stage 10; then
  for d in exp/nnet_1job exp/nnet; do
    for lm in "" _ug; do
      steps/decode.sh --nj $nj --cmd "$train_cmd" --nnet $d/final.mdl --trans-model exp/tri3_ali/final.mdl \
        exp/tri3/graph$lm data/test_fbank $d/decode_test$lm
    done
  done
  stage_done dnn_decode
fi
if run_stage 11; then
  echo "%WER on held-out speakers and sentences, best over LM weights and insertion penalties"
  echo "(trigram: perplexity $(awk '/ppl=/ {print $6}' data/local/lm/ppl_test); unigram: $(awk '/ppl=/ {print $6}' data/local/lm/ppl_test_ug)):"
  printf "%-26s %-8s %-12s %-8s %s\n" system trigram "(best of)" unigram "(best of)"
  for s in "mono:monophone" "tri1:tri1 (deltas)" "tri2:tri2 (LDA+MLLT)" "tri3:tri3 (SAT)" \
           "nnet_1job:DNN, 1 job" "nnet:DNN, 2 -> 4 jobs"; do
    row=$(printf "%-26s" "${s#*:}")
    for lm in "" _ug; do
      d=exp/${s%%:*}/decode_test$lm
      best=$([ -d $d ] && grep -H WER $d/wer_* | utils/best_wer.sh || echo "- - - - - - - - - - - -")
      row="$row $(printf "%-8s %-12s" "$(echo "$best" | awk '{print $2}')" "($(basename "$(echo "$best" | awk '{print $NF}')" | sed 's/^wer_//'))")"
    done
    echo "$row" | sed "s/ *$//"
  done
  echo
fi
print_stage_times
