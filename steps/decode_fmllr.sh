#!/usr/bin/env bash
# Kaldi's steps/decode_fmllr.sh: decode with a SAT model (tri3) and per-speaker fMLLR estimated
# from the data itself. A speaker-independent decode (steps/decode.sh with SRC-DIR/final.alimdl,
# train_sat.sh's speaker-independent model, else the SAT model itself) into DECODE_DIR.si, scored
# there as Kaldi's; the posteriors of its lattices (silence weighted --silence-weight, Gaussian
# posteriors from that model) give the first transforms; a pass on the adapted features, its
# lattices at beam 4, gives a second transform composed on the first; a last pass writes
# DECODE_DIR/lat.JOB.gz, then scoring as steps/decode.sh. Where Kaldi rescores the second pass's
# state-level lattices with the final features (gmm-rescore-lattice) we decode a third time.
help_message="Usage: steps/decode_fmllr.sh [options] <graph-dir> <data-dir> <decode-dir>
 e.g.: steps/decode_fmllr.sh --nj 4 --cmd \"\$train_cmd\" exp/tri3/graph data/test exp/tri3/decode_test
Options: --nj, --cmd, --acwt (0.083333), --beam (20), --first-beam (20), --lattice-beam (6.0),
  --silence-weight (0.01), --scoring-opts, --skip-scoring (false; DECODE_DIR.si is scored unless true)"
set -euo pipefail
cmd="nnet-queue local"
nj=4
acwt=0.083333
beam=20        # Kaldi's 13 and 10; 20 as steps/decode.sh says why (our lattice decoder has no
first_beam=20  # min-active). spoken_commands' tri3: 4.40 % best WER at 13/10, 4.09 at 20/20.
lattice_beam=6.0
silence_weight=0.01
scoring_opts=
skip_scoring=false
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 3 ] || { echo "$help_message" 1>&2; exit 1; }
graphdir=$1; data=$2; dir=$3
srcdir=$(dirname $dir)
for f in $graphdir/HCLG.fst $graphdir/phones/silence.csl $data/feats.scp $data/cmvn.scp $srcdir/final.mdl; do
  [ -f $f ] || { echo "$0: expected file $f to exist" 1>&2; exit 1; }
done
utils/validate_data_dir.sh $([ -f $data/text ] || echo --no-text) --lang $graphdir $data
utils/split_data.sh $data $nj
mkdir -p $dir/log
utils/atomic_write.sh $dir/num_jobs echo $nj
sdata=$data/split$nj
mdl=$srcdir/final.mdl
sifeats=$(steps/gmm_feats.sh $sdata $srcdir)
adapted() { echo "${sifeats%|}| nnet-transform-feats --utt2spk ark:$sdata/JOB/utt2spk ark:$dir/$1.JOB ark:- ark:- |"; }
alimdl=$mdl
[ -f $srcdir/final.alimdl ] && alimdl=$srcdir/final.alimdl
latgen="nnet-latgen-faster-mapped --acoustic-scale $acwt --allow-partial true $mdl $graphdir/HCLG.fst ark:-"
to_post="nnet-lattice-to-post --acoustic-scale $acwt ark:- ark:-"
fmllr="nnet-gmm-est-fmllr --posteriors --spk2utt ark:$sdata/JOB/spk2utt --silence-phones $(cat $graphdir/phones/silence.csl) --silence-weight $silence_weight"
rm -f $dir/lat.*.gz $dir/words.*.txt
echo "$0: speaker-independent decode with $alimdl into $dir.si"
steps/decode.sh --nj $nj --cmd "$cmd" --acwt $acwt --beam $first_beam --lattice-beam $lattice_beam \
  --trans-model $alimdl --skip-scoring $skip_scoring --scoring-opts "$scoring_opts" $graphdir $data $dir.si
echo "$0: first fMLLR transforms, from the lattices' posteriors"
$cmd JOB=1:$nj $dir/log/fmllr_pass1.JOB.log bash -o pipefail -c \
  "gunzip -c $dir.si/lat.JOB.gz | $to_post | $fmllr --gpost-model $alimdl $mdl \"$sifeats\" ark:- ark:$dir/pre_trans.JOB"
echo "$0: pass on the adapted features, then the second transforms"
$cmd JOB=1:$nj $dir/log/decode_pass1.JOB.log bash -o pipefail -c \
  "nnet-gmm-compute-likes $mdl \"$(adapted pre_trans)\" ark:- | ${latgen/--acoustic-scale/--beam $beam --lattice-beam 4.0 --acoustic-scale} ark:- |
   $to_post | $fmllr $mdl \"$(adapted pre_trans)\" ark:- ark:$dir/trans_tmp.JOB &&
   nnet-compose-transforms --b-is-affine true ark:$dir/trans_tmp.JOB ark:$dir/pre_trans.JOB ark:$dir/trans.JOB"
echo "$0: final pass"
$cmd JOB=1:$nj $dir/log/decode.JOB.log bash -o pipefail -c \
  "nnet-gmm-compute-likes $mdl \"$(adapted trans)\" ark:- | ${latgen/--acoustic-scale/--beam $beam --lattice-beam $lattice_beam --acoustic-scale} \"ark:| utils/atomic_write.sh $dir/lat.JOB.gz gzip -c\" ark,t:$dir/words.JOB.txt"
rm -f $dir/pre_trans.* $dir/trans_tmp.*
if ! $skip_scoring; then
  [ -x local/score.sh ] || { echo "$0: not scoring: local/score.sh does not exist or is not executable" 1>&2; exit 1; }
  local/score.sh --cmd "$cmd" $scoring_opts $data $graphdir $dir
fi
