#!/usr/bin/env bash
# A hybrid DNN's examples from a GMM's alignments: per-frame pdf-id targets (ali-to-pdf, into
# DATA/targets.scp), their counts (the DNN's priors: ALI_DIR/pdf_counts), the model config with
# the alignment model's pdf count as output dim (EXP/model.yaml), and the egs (steps/get_egs.sh)
# with the model's context, at least --min-archives archives of at most --max-egs-per-archive egs
# (an epoch's iterations: with chunk training, one per archive and job).
help_message="Usage: steps/make_dnn_egs.sh [options] <model-config> <ali-dir> <data-dir> <exp-dir>
 e.g.: steps/make_dnn_egs.sh --cmd \"\$train_cmd\" conf/model.yaml exp/tri2_ali data/train_fbank exp
       (writes exp/model.yaml and exp/egs)
Options: --cmd, --frames-per-eg (8), --max-egs-per-archive (100000; Kaldi: --samples-per-iter 400000),
         --min-archives (16), --dnn-cmvn global|speaker|online (global: what vosk applies), --nj (1)"
set -euo pipefail
cmd="nnet-queue local"
frames_per_eg=8
max_egs_per_archive=100000
min_archives=16    # an epoch of 16 iterations at 1 job, 5 at 2 -> 4 jobs, however small the data
dnn_cmvn=global
nj=1
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 4 ] || { echo "$help_message" 1>&2; exit 1; }
config=$1; alidir=$2; data=$3; exp=$4
for f in $config $alidir/final.mdl $alidir/ali.1.ark $data/feats.scp; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
case $dnn_cmvn in
  global) cmvn=(--global-cmvn true) ;; online) cmvn=(--online-cmvn true) ;; speaker) cmvn=() ;;
  *) echo "$0: --dnn-cmvn must be global, speaker or online, got '$dnn_cmvn'" 1>&2; exit 1 ;;
esac
mkdir -p $exp $alidir/log
# ali-to-pdf: the per-frame targets; their counts are the priors (Kaldi's default).
$cmd $alidir/log/ali_to_pdf.log nnet-ali-to-pdf $alidir/final.mdl "ark:cat $alidir/ali.*.ark |" \
  ark,scp:$PWD/$alidir/pdf.ark,$data/targets.scp
num_pdfs=$(nnet-gmm-info $alidir/final.mdl 2> /dev/null | awk '/^number of pdfs/ {print $4}')
$cmd $alidir/log/sum_pdf_counts.log nnet-sum-pdf-counts --counts-dim $num_pdfs --normalize false \
  scp:$data/targets.scp $alidir/pdf_counts
# The output layer: one output per pdf of the alignment model, whatever the config says.
$cmd $exp/log/model_init.log nnet-init --output-dim-from $alidir/final.mdl --write-config $exp/model.yaml \
  $config $exp/model_context.mdl
left=$(nnet-info $exp/model_context.mdl 2> /dev/null | awk '/^left-context/ {print $2}')
right=$(nnet-info $exp/model_context.mdl 2> /dev/null | awk '/^right-context/ {print $2}')
rm $exp/model_context.mdl
# Diagnostic subsets of 100 utterances (Kaldi: 300), fewer on a small corpus.
ntrain=$(wc -l < $data/targets.scp)
subset=$(( ntrain / 5 < 100 ? ntrain / 5 : 100 ))
frames=$(tr -d '[]' < $alidir/pdf_counts | awk '{ for (i = 1; i <= NF; i++) t += $i } END { print t }')
# The archive count: nnet-get-egs makes int(F / (frames-per-eg x samples-per-iter)) + 1 from F, the
# frames outside the valid subset; aim between two counts, as F is estimated here.
samples_per_iter=$(awk -v f=$frames -v u=$ntrain -v s=$subset -v e=$frames_per_eg -v m=$max_egs_per_archive \
  -v n=$min_archives 'BEGIN { egs = f * (u - s) / u / e; a = int(egs / m) + 1; if (a < n) a = n
                              print int(egs / (a - 0.5)) }')
steps/get_egs.sh --cmd "$cmd" --nj $nj --frames-per-eg $frames_per_eg --left-context $left --right-context $right \
  --samples-per-iter $samples_per_iter --num-utts-subset $subset --num-targets $num_pdfs "${cmvn[@]}" \
  $data $exp/egs
