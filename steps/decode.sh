#!/usr/bin/env bash
# Kaldi's steps/decode.sh for a GMM (gmm-compute-likes | decode-faster-mapped, best path), or, with
# --nnet MODEL, the hybrid DNN: log-likelihoods = log-posteriors - log-priors from nnet-compute.
# CMVN: per speaker from DATA/cmvn.scp, or online or global as MODEL's dir records (below).
# Then scoring: DECODE_DIR/wer_<lmwt> with lmwt = 1/acoustic-scale.
help_message="Usage: steps/decode.sh [options] <graph-dir> <data-dir> <decode-dir>
 e.g.: steps/decode.sh --nj 4 --cmd \"\$train_cmd\" exp/mono/graph data/test exp/mono/decode_test
       steps/decode.sh --nnet exp/nnet/final.mdl --trans-model exp/mono_ali/final.mdl exp/mono/graph data/test_fbank exp/nnet/decode_test
Options: --nj, --cmd, --acwt (0.1), --beam (13), --max-active (7000), --nnet, --priors, --cmvn-opts, --trans-model, --use-gpu"
set -euo pipefail
cmd="nnet-queue local"
nj=4
acwt=0.1
beam=13
max_active=7000
nnet=
priors=
cmvn_opts=
trans_model=
use_gpu=no
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
graphdir=$1; data=$2; dir=$3
srcdir=$(dirname $dir)
[ -z "$trans_model" ] && trans_model=$srcdir/final.mdl
for f in $graphdir/HCLG.fst $data/feats.scp $trans_model ${priors:+$priors}; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
# Test words the graph cannot output are counted (each is an error in scoring); wrong case refused.
utils/validate_data_dir.sh $([ -f $data/text ] || echo --no-text) --lang $graphdir $data
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
utils/split_data.sh $data $nj
sdata=$data/split$nj
# CMVN as Kaldi applies it, when the data dir has cmvn.scp (a dir of normalised features has none).
feats="scp:$sdata/JOB/feats.scp"
[ -f $data/cmvn.scp ] && feats="ark:nnet-apply-cmvn $cmvn_opts --utt2spk $sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- |"
# A DNN trained on online or global CMVN (steps/get_egs.sh --online-cmvn / --global-cmvn, copied
# into its dir by training) gets the same here: online from the training features' global
# statistics, each utterance on its own; or their one global mean.
mdir=$([ -n "$nnet" ] && dirname $nnet || true)
if [ -n "$nnet" ] && [ -f $mdir/online_cmvn ]; then
  feats="ark:nnet-apply-cmvn-online $cmvn_opts $mdir/global_cmvn.stats scp:$sdata/JOB/feats.scp ark:- |"
elif [ -n "$nnet" ] && [ -f $mdir/global_cmvn.stats ]; then
  feats="ark:nnet-apply-cmvn $cmvn_opts $mdir/global_cmvn.stats scp:$sdata/JOB/feats.scp ark:- |"
fi
if [ -z "$nnet" ]; then
  likes="nnet-gmm-compute-likes $trans_model \"${feats%|}| nnet-add-deltas ark:- ark:- |\" ark:-"
  [ -f $data/cmvn.scp ] || likes="nnet-gmm-compute-likes $trans_model \"ark:nnet-add-deltas $feats ark:- |\" ark:-"
else
  # The model's priors turn its log-posteriors into log-likelihoods (--priors FILE overrides them).
  likes="nnet-compute --use-gpu $use_gpu ${priors:+--priors $priors} $nnet \"$feats\" ark:-"
fi
$cmd JOB=1:$nj $dir/log/decode.JOB.log bash -c \
  "$likes | nnet-decode-faster-mapped --acoustic-scale $acwt --beam $beam --max-active $max_active $trans_model $graphdir/HCLG.fst ark:- ark,t:$dir/words.JOB.txt"
local/score.sh $data $graphdir $dir
