#!/usr/bin/env bash
# A vosk model dir from a trained DNN dir (vosk's "V2" layout, Kaldi's online2 nnet3 decoder):
#   am/final.mdl          nnet-to-kaldi: TransitionModel of <trans-model> + AmNnetSimple with priors
#   am/global_cmvn.stats  when the DNN was trained on global CMVN (get_egs.sh --global-cmvn true)
#   conf/model.conf       decoder options: --acoustic-scale, beams, endpoint silence phones
#   conf/<type>.conf      the features' options, as the recipe made them (fbank.conf or mfcc.conf)
#   graph/HCLG.fst, graph/words.txt (+ graph/phones/word_boundary.int when the lang has it)
# vosk 0.3.45 applies no CMVN, or with am/global_cmvn.stats the global mean alone (measured: its
# words equal ours for a model trained on that, and not for one trained on apply-cmvn-online's
# sliding window), so a DNN trained on per-speaker or online CMVN is refused. The dir is built
# beside <vosk-dir> and moved into place when complete.
help_message="Usage: steps/make_vosk_model.sh [options] <lang-dir> <graph-dir> <trans-model> <nnet-dir> <vosk-dir>
 e.g.: steps/make_vosk_model.sh --feat-type fbank --feat-conf conf/fbank.conf \\
         data/lang exp/mono/graph exp/mono_ali/final.mdl exp/nnet exp/nnet/vosk_model
Options: --feat-type fbank|mfcc (fbank), --feat-conf FILE (required: the features' conf),
         --acwt (0.1), --beam (13), --max-active (7000), --lattice-beam (6)"
set -euo pipefail
feat_type=fbank
feat_conf=
acwt=0.1
beam=13
max_active=7000
lattice_beam=6
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 5 ] || { echo "$help_message" 1>&2; exit 1; }
lang=$1; graph=$2; trans_model=$3; nnet_dir=$4; dir=$5
case "$feat_type" in fbank|mfcc) ;; *) echo "$0: --feat-type must be fbank or mfcc, got '$feat_type'" 1>&2; exit 1 ;; esac
[ -n "$feat_conf" ] || { echo "$0: --feat-conf is required (the conf the DNN's features were made with)" 1>&2; exit 1; }
for f in $lang/words.txt $lang/phones/silence.csl $graph/HCLG.fst $trans_model $nnet_dir/final.mdl $feat_conf; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
cmvn_opts=$(cat $nnet_dir/cmvn_opts 2>/dev/null || echo --norm-means=false)
if [ -f $nnet_dir/online_cmvn ]; then
  echo "$0: $nnet_dir was trained on online CMVN, which vosk does not reproduce (it subtracts the" \
    "global mean only); make its egs with steps/get_egs.sh --global-cmvn true" 1>&2
  exit 1
elif [ -f $nnet_dir/global_cmvn.stats ]; then
  case " $cmvn_opts " in *--norm-vars=true*)
    echo "$0: $nnet_dir was trained on global CMVN with variances ($cmvn_opts); vosk subtracts the mean only" 1>&2
    exit 1 ;;
  esac
elif [ "$cmvn_opts" != "--norm-means=false" ]; then
  echo "$0: $nnet_dir was trained on per-speaker CMVN ($cmvn_opts), which vosk cannot apply;" \
    "make its egs with steps/get_egs.sh --global-cmvn true" 1>&2
  exit 1
fi

tmp=$dir.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"; mkdir -p $tmp/am $tmp/conf $tmp/graph
mkdir -p $nnet_dir/log
nnet-to-kaldi --transition-model $trans_model $nnet_dir/final.mdl $tmp/am/final.mdl 2> $nnet_dir/log/make_vosk_model.log ||
  { grep ERROR $nnet_dir/log/make_vosk_model.log 1>&2; exit 1; }
[ -f $nnet_dir/global_cmvn.stats ] && cp $nnet_dir/global_cmvn.stats $tmp/am/global_cmvn.stats
grep -v '^[[:space:]]*#' $feat_conf | grep -v '^[[:space:]]*$' > $tmp/conf/$feat_type.conf || true
cat > $tmp/conf/model.conf <<EOF
--min-active=200
--max-active=$max_active
--beam=$beam
--lattice-beam=$lattice_beam
--acoustic-scale=$acwt
--frame-subsampling-factor=1
--endpoint.silence-phones=$(cat $lang/phones/silence.csl)
--endpoint.rule2.min-trailing-silence=0.5
--endpoint.rule3.min-trailing-silence=1.0
--endpoint.rule4.min-trailing-silence=2.0
EOF
cp $graph/HCLG.fst $tmp/graph/HCLG.fst
cp $lang/words.txt $tmp/graph/words.txt
if [ -f $lang/phones/word_boundary.int ]; then
  mkdir -p $tmp/graph/phones && cp $lang/phones/word_boundary.int $tmp/graph/phones/
fi
rm -rf $dir
mv $tmp $dir
echo "$0: wrote the vosk model dir $dir (am/final.mdl from $nnet_dir/final.mdl$([ -f $nnet_dir/global_cmvn.stats ] && echo ', global CMVN'))"
