#!/usr/bin/env bash
# Kaldi's steps/align_fmllr.sh: align a data dir with a SAT model (tri3): a first alignment on the
# speaker-independent features, per-speaker fMLLR transforms from it (silence weighted 0), then
# the alignment on the adapted features -> DIR/ali.JOB.ark, DIR/trans.JOB, DIR/final.mdl.
# The first pass uses SRC-DIR/final.alimdl (steps/train_sat.sh's speaker-independent model) when
# there is one, final.mdl otherwise, as Kaldi's.
help_message="Usage: steps/align_fmllr.sh [options] <data-dir> <lang-dir> <src-dir> <align-dir>
 e.g.: steps/align_fmllr.sh --nj 4 --cmd \"\$train_cmd\" data/train data/lang exp/tri3 exp/tri3_ali
Options: --nj, --cmd, --beam (10), --retry-beam (40)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
beam=10
retry_beam=40
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 4 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1; lang=$2; srcdir=$3; dir=$4
for f in $data/feats.scp $data/cmvn.scp $data/text $srcdir/final.mdl; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
utils/validate_data_dir.sh --lang $lang $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
sdata=$data/split$nj
utils/atomic_write.sh $dir/final.mdl cat $srcdir/final.mdl
for f in tree final.mat splice_opts final.alimdl; do
  rm -f $dir/$f
  if [ -f $srcdir/$f ]; then utils/atomic_write.sh $dir/$f cat $srcdir/$f; fi
done
utils/atomic_write.sh $dir/num_jobs echo $nj
sifeats=$(steps/gmm_feats.sh $sdata $dir)
align="nnet-gmm-align $scale_opts --beam $beam --retry-beam $retry_beam"
alimdl=$dir/final.mdl
[ -f $dir/final.alimdl ] && alimdl=$dir/final.alimdl
echo "$0: aligning data in $data using $alimdl and speaker-independent features"
$cmd JOB=1:$nj $dir/log/align_pass1.JOB.log $align $alimdl $lang "$sifeats" $sdata/JOB/text ark:$dir/pre_ali.JOB.ark
echo "$0: computing fMLLR transforms"
$cmd JOB=1:$nj $dir/log/fmllr.JOB.log \
  nnet-gmm-est-fmllr --spk2utt ark:$sdata/JOB/spk2utt --silence-phones $(cat $lang/phones/silence.csl) --silence-weight 0.0 \
  $dir/final.mdl "$sifeats" ark:$dir/pre_ali.JOB.ark ark:$dir/trans.JOB
echo "$0: doing final alignment"
$cmd JOB=1:$nj $dir/log/align_pass2.JOB.log $align $dir/final.mdl $lang \
  "${sifeats%|}| nnet-transform-feats --utt2spk ark:$sdata/JOB/utt2spk ark:$dir/trans.JOB ark:- ark:- |" \
  $sdata/JOB/text ark:$dir/ali.JOB.ark
rm $dir/pre_ali.*.ark
grep -h "Done [0-9]*, errors on" $dir/log/align_pass2.*.log | sed 's/^.*) //' | awk '{d += $2; e += $5} END {print "'$0': aligned " d " utterances, errors on " e}'
