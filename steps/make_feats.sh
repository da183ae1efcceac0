#!/usr/bin/env bash
# Kaldi's steps/make_mfcc.sh / make_fbank.sh: DATA/wav.scp -> FEAT_DIR/raw_<type>_<name>.JOB.{ark,scp}
# through $cmd JOB=1:nj, then DATA/feats.scp. A wav that cannot be read is skipped and counted; one
# at another sample rate than the conf file's stops the step. With DATA/segments, wav.scp lists
# recordings and each utterance is cut from its own (Kaldi: extract-segments | compute-mfcc-feats).
help_message="Usage: steps/make_feats.sh [options] <data-dir> [<log-dir> [<feat-dir>]]
 e.g.: steps/make_feats.sh --feat-type mfcc --conf conf/mfcc.conf --nj 4 --cmd \"\$train_cmd\" data/train exp/make_mfcc/train mfcc
Options: --feat-type mfcc|fbank, --conf, --nj, --cmd
(as Kaldi's: <log-dir> defaults to <data-dir>/log, <feat-dir> to <data-dir>/data)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
feat_type=mfcc
conf=
. "$(dirname "$0")/parse_options.sh"
[ $# -ge 1 ] && [ $# -le 3 ] || { echo "$help_message" 1>&2; exit 1; }
data=$1; logdir=${2:-$data/log}; featdir=${3:-$data/data}
[ -f $data/wav.scp ] || { echo "$0: expected file $data/wav.scp to exist" 1>&2; exit 1; }
utils/validate_data_dir.sh --no-text --no-feats $data > /dev/null
name=$(basename $data)
utils/split_data.sh $data $nj
mkdir -p $logdir $featdir
featdir=$(cd $featdir && pwd)
opts=(--type $feat_type); [ -n "$conf" ] && opts+=(--config $conf)
[ -f $data/segments ] && opts+=(--segments $data/split$nj/JOB/segments)
$cmd JOB=1:$nj $logdir/make_${feat_type}_$name.JOB.log \
  nnet-compute-feats "${opts[@]}" $data/split$nj/JOB/wav.scp \
  ark,scp:$featdir/raw_${feat_type}_$name.JOB.ark,$featdir/raw_${feat_type}_$name.JOB.scp
utils/atomic_write.sh $data/feats.scp sort $(seq -f "$featdir/raw_${feat_type}_$name.%g.scp" $nj)
nf=$(wc -l < $data/feats.scp); nu=$(wc -l < $data/utt2spk)
[ $nf -eq $nu ] || echo "$0: WARNING: features for $nf of $nu utterances (see $logdir/make_${feat_type}_$name.*.log)"
echo "$0: succeeded making $feat_type features for $name ($nf utterances)"
