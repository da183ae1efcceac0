#!/usr/bin/env bash
# Kaldi's steps/score_kaldi.sh (recipes link local/score.sh here, as Kaldi's link it there): the WER
# of a decode dir at every LM weight and word insertion penalty. From DECODE_DIR/lat.*.gz:
# nnet-lattice-best-path sweeps LMWT = min..max x penalties in one pass over the lattices (Kaldi
# runs lattice-scale --inv-acoustic-scale=LMWT | lattice-add-penalty | lattice-best-path per pair)
# -> scoring_kaldi/penalty_<P>/<LMWT>.txt -> DECODE_DIR/wer_<LMWT>_<P> in compute-wer's format, and
# the lowest in scoring_kaldi/best_wer (utils/best_wer.sh), its LMWT and P in scoring_kaldi/wer_details.
# A best-path decode (DECODE_DIR/words.*.txt and no lattices: vosk, steps/decode.sh --one-best true)
# has one setting: LMWT = --one-best-lmwt (1/acoustic scale: 10), penalty 0.0 -> wer_10_0.0.
# local/wer_output_filter, local/wer_ref_filter and local/wer_hyp_filter filter the words as Kaldi's do.
help_message="Usage: steps/score.sh [options] <data-dir> <lang-dir|graph-dir> <decode-dir>
 e.g.: steps/score.sh --cmd \"\$train_cmd\" data/test exp/mono/graph exp/mono/decode_test
Options: --cmd, --stage (0: score; 1: best_wer only), --min-lmwt (7), --max-lmwt (17),
  --word-ins-penalty (0.0,0.5,1.0), --one-best-lmwt (10)"
set -euo pipefail
cmd="nnet-queue local"
stage=0
min_lmwt=7
max_lmwt=17
word_ins_penalty=0.0,0.5,1.0
one_best_lmwt=10
. "$(dirname "$(readlink -f "$0")")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1; lang_or_graph=$2; dir=$3
symtab=$lang_or_graph/words.txt
for n in "$stage" "$min_lmwt" "$max_lmwt" "$one_best_lmwt"; do
  [[ "$n" =~ ^[0-9]+$ ]] ||
    { echo "$0: --stage, --min-lmwt, --max-lmwt and --one-best-lmwt must be integers, got '$n'" 1>&2; exit 1; }
done
[ $min_lmwt -ge 1 ] && [ $max_lmwt -ge $min_lmwt ] ||
  { echo "$0: need 1 <= --min-lmwt <= --max-lmwt, got $min_lmwt and $max_lmwt" 1>&2; exit 1; }
[[ "$word_ins_penalty" =~ ^-?[0-9.]+(,-?[0-9.]+)*$ ]] ||
  { echo "$0: --word-ins-penalty must be a comma-separated list of numbers, e.g. 0.0,0.5,1.0, got '$word_ins_penalty'" 1>&2; exit 1; }
for f in $symtab $data/text; do
  [ -f $f ] || { echo "$0: no such file $f" 1>&2; exit 1; }
done
if [ -f $dir/lat.1.gz ]; then
  lmwts=$(seq $min_lmwt $max_lmwt); wips=${word_ins_penalty//,/ }
elif [ -f $dir/words.1.txt ]; then
  lmwts=$one_best_lmwt; wips=0.0
else
  echo "$0: $dir has neither lat.1.gz (a lattice decode) nor words.1.txt (a best-path decode)" 1>&2; exit 1
fi

ref_filtering_cmd=cat
[ -x local/wer_output_filter ] && ref_filtering_cmd=local/wer_output_filter
[ -x local/wer_ref_filter ] && ref_filtering_cmd=local/wer_ref_filter
hyp_filtering_cmd=cat
[ -x local/wer_output_filter ] && hyp_filtering_cmd=local/wer_output_filter
[ -x local/wer_hyp_filter ] && hyp_filtering_cmd=local/wer_hyp_filter

mkdir -p $dir/scoring_kaldi/log
for wip in $wips; do mkdir -p $dir/scoring_kaldi/penalty_$wip/log; done
utils/atomic_write.sh $dir/scoring_kaldi/test_filt.txt $ref_filtering_cmd < $data/text
if [ $stage -le 0 ]; then
  if [ -f $dir/lat.1.gz ]; then
    echo "$0: scoring with word insertion penalty=$word_ins_penalty"
    # Each LMWT.txt appears whole or not at all: written through atomic_write.sh.
    hyps="utils/int2sym.sh $symtab"
    [ "$hyp_filtering_cmd" = cat ] || hyps="bash -o pipefail -c '$hyps | $hyp_filtering_cmd'"
    $cmd $dir/scoring_kaldi/log/best_path.log \
      nnet-lattice-best-path --lmwt-range $min_lmwt:$max_lmwt --word-ins-penalties $word_ins_penalty \
      "ark:gunzip -c $dir/lat.*.gz |" "ark,t:| utils/atomic_write.sh $dir/scoring_kaldi/penalty_WIP/LMWT.txt $hyps"
  else
    utils/atomic_write.sh $dir/scoring_kaldi/penalty_0.0/$one_best_lmwt.txt bash -o pipefail -c \
      "cat $dir/words.*.txt | utils/int2sym.sh $symtab | $hyp_filtering_cmd"
  fi
  for wip in $wips; do
    first=${lmwts%%[[:space:]]*}; last=${lmwts##*[[:space:]]}
    $cmd LMWT=$first:$last $dir/scoring_kaldi/penalty_$wip/log/score.LMWT.log \
      utils/atomic_write.sh $dir/wer_LMWT_$wip nnet-compute-wer --text --mode present \
      $dir/scoring_kaldi/test_filt.txt $dir/scoring_kaldi/penalty_$wip/LMWT.txt
  done
fi

for wip in $wips; do
  for lmwt in $lmwts; do
    grep WER $dir/wer_${lmwt}_${wip} /dev/null   # /dev/null: grep names the file
  done
done | utils/atomic_write.sh $dir/scoring_kaldi/best_wer utils/best_wer.sh
best_wer_file=$(awk '{print $NF}' $dir/scoring_kaldi/best_wer)
best_wip=${best_wer_file##*_}
best_lmwt=${best_wer_file%_*}; best_lmwt=${best_lmwt##*_}
[ -n "$best_lmwt" ] && [ -n "$best_wip" ] ||
  { echo "$0: no best WER among $dir/wer_*: probably something went wrong" 1>&2; exit 1; }
mkdir -p $dir/scoring_kaldi/wer_details
utils/atomic_write.sh $dir/scoring_kaldi/wer_details/lmwt echo $best_lmwt   # the best LM weight
utils/atomic_write.sh $dir/scoring_kaldi/wer_details/wip echo $best_wip     # and word insertion penalty
# As Kaldi's: the old scoring's wer_<lmwt> files go, so that no grep of wer_* picks one up.
rm -f $dir/wer_{?,??}
exit 0
