#!/usr/bin/env bash
# Kaldi's steps/decode.sh for a GMM (gmm-compute-likes | latgen-faster-mapped), or, with --nnet
# MODEL, the hybrid DNN: log-likelihoods = log-posteriors - log-priors from nnet-compute.
# CMVN: per speaker from DATA/cmvn.scp, or online or global as MODEL's dir records (below).
# Writes DECODE_DIR/lat.JOB.gz (Kaldi's CompactLattices, text) and the decoder's best path in
# words.JOB.txt, then scores as Kaldi: local/score.sh (steps/score.sh) -> DECODE_DIR/wer_<LMWT>_<P>
# for LMWT 7..17 and penalties 0.0,0.5,1.0, the best in scoring_kaldi/best_wer. --one-best true:
# the best path only (decode-faster-mapped, the one decoder with --max-active), scored at one LM
# weight, 1/acoustic-scale: wer_10_0.0.
help_message="Usage: steps/decode.sh [options] <graph-dir> <data-dir> <decode-dir>
 e.g.: steps/decode.sh --nj 4 --cmd \"\$train_cmd\" exp/mono/graph data/test exp/mono/decode_test
       steps/decode.sh --nnet exp/nnet/final.mdl --trans-model exp/mono_ali/final.mdl exp/mono/graph data/test_fbank exp/nnet/decode_test
Options: --nj, --cmd, --acwt (0.1), --beam (13; 20 for lattices: see below), --lattice-beam (6.0),
  --max-active (7000; --one-best only: the lattice decoder has none), --one-best (false), --nnet, --priors,
  --cmvn-opts, --trans-model, --use-gpu, --scoring-opts (to local/score.sh, e.g. \"--min-lmwt 5 --max-lmwt 15\"), --skip-scoring (false)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
acwt=0.1
beam=           # Kaldi's 13. The lattice decoder (kaldi-decoder's LatticeSimpleDecoder) has no
                # --min-active (Kaldi's latgen: 200, more than a small graph's states, so it never
                # prunes below that) and at 13 loses paths on small graphs: spoken_digits' GMM 6.95% WER
                # at LMWT 10, 4.39% at 20, the best-path decoder (min-active 20) 4.51% at 13. So 20.
lattice_beam=6.0
max_active=7000
one_best=false
scoring_opts=
skip_scoring=false
nnet=
priors=
cmvn_opts=
trans_model=
use_gpu=no
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
graphdir=$1; data=$2; dir=$3
for b in one_best skip_scoring; do
  [[ "${!b}" =~ ^(true|false)$ ]] || { echo "$0: --${b//_/-} must be true or false, got '${!b}'" 1>&2; exit 1; }
done
[ -n "$beam" ] || beam=$($one_best && echo 13 || echo 20)
srcdir=$(dirname $dir)
[ -z "$trans_model" ] && trans_model=$srcdir/final.mdl
for f in $graphdir/HCLG.fst $data/feats.scp $trans_model ${priors:+$priors}; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
# Test words the graph cannot output are counted (each is an error in scoring); wrong case refused.
utils/validate_data_dir.sh $([ -f $data/text ] || echo --no-text) --lang $graphdir $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
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
  # The GMM's own features: CMVN + deltas, or LDA+MLLT when its dir has final.mat (steps/gmm_feats.sh).
  likes="nnet-gmm-compute-likes $trans_model \"$(steps/gmm_feats.sh $sdata $(dirname $trans_model))\" ark:-"
  [ -f $data/cmvn.scp ] || likes="nnet-gmm-compute-likes $trans_model \"ark:nnet-add-deltas $feats ark:- |\" ark:-"
else
  # The model's priors turn its log-posteriors into log-likelihoods (--priors FILE overrides them).
  likes="nnet-compute --use-gpu $use_gpu ${priors:+--priors $priors} $nnet \"$feats\" ark:-"
fi
# A decode of the other kind, or with more jobs, left its files: scoring would read them.
rm -f $dir/lat.*.gz $dir/words.*.txt
if $one_best; then
  $cmd JOB=1:$nj $dir/log/decode.JOB.log bash -c \
    "$likes | nnet-decode-faster-mapped --acoustic-scale $acwt --beam $beam --max-active $max_active $trans_model $graphdir/HCLG.fst ark:- ark,t:$dir/words.JOB.txt"
else
  $cmd JOB=1:$nj $dir/log/decode.JOB.log bash -c \
    "$likes | nnet-latgen-faster-mapped --acoustic-scale $acwt --beam $beam --lattice-beam $lattice_beam --allow-partial true --word-symbol-table $graphdir/words.txt $trans_model $graphdir/HCLG.fst ark:- \"ark:| utils/atomic_write.sh $dir/lat.JOB.gz gzip -c\" ark,t:$dir/words.JOB.txt"
fi
if ! $skip_scoring; then
  [ -x local/score.sh ] || { echo "$0: not scoring: local/score.sh does not exist or is not executable" 1>&2; exit 1; }
  local/score.sh --cmd "$cmd" $scoring_opts $data $graphdir $dir
fi
