#!/usr/bin/env bash
# What Kaldi's train_deltas.sh, train_lda_mllt.sh and train_sat.sh all do before their passes:
# tree statistics of DIR/feats.JOB.ark under the alignment dir's alignments (acc-tree-stats),
# questions by clustering the phones (cluster-phones, plus the lang's extra questions), a tree of
# at most <num-leaves> leaves (build-tree), one Gaussian per leaf (gmm-init-model, gmm-mixup)
# as DIR/1.mdl, and the alignments converted to it (convert-ali) as DIR/ali.JOB.ark.
help_message="Usage: steps/init_tree_model.sh [options] <num-leaves> <lang-dir> <alignment-dir> <exp-dir>
 e.g.: steps/init_tree_model.sh --cmd \"\$train_cmd\" 2000 data/lang exp/mono_ali exp/tri1
Options: --cmd, --cluster-thresh (-1), --stage (-3)"
set -euo pipefail
cmd="nnet-queue local"
stage=-3
cluster_thresh=-1
. "$(dirname "$0")/parse_options.sh"
[ $# -eq 4 ] || { echo "$help_message" 1>&2; exit 1; }
numleaves=$1; lang=$2; alidir=$3; dir=$4
nj=$(cat $alidir/num_jobs)
feats="ark:$dir/feats.JOB.ark"
if [ $stage -le -3 ]; then
  echo "$0: accumulating tree stats"
  $cmd JOB=1:$nj $dir/log/acc_tree.JOB.log \
    nnet-acc-tree-stats --ci-phones $(cat $lang/phones/context_indep.csl) $alidir/final.mdl $feats \
    ark:$alidir/ali.JOB.ark $dir/JOB.treeacc
  $cmd $dir/log/sum_tree_acc.log nnet-sum-tree-stats $dir/treeacc $(for j in $(seq $nj); do echo $dir/$j.treeacc; done)
  rm $dir/*.treeacc
fi
if [ $stage -le -2 ]; then
  echo "$0: getting questions for tree-building, via clustering"
  $cmd $dir/log/questions.log nnet-cluster-phones $dir/treeacc $lang/phones/sets.int $dir/questions.int
  cat $lang/phones/extra_questions.int >> $dir/questions.int
  echo "$0: building the tree"
  $cmd $dir/log/build_tree.log nnet-build-tree --max-leaves $numleaves --cluster-thresh $cluster_thresh \
    $dir/treeacc $lang/phones/roots.int $dir/questions.int $lang/topo $dir/tree
  $cmd $dir/log/init_model.log nnet-gmm-init-model --write-occs $dir/1.occs $dir/tree $dir/treeacc $lang/topo $dir/1.mdl
  $cmd $dir/log/mixup.log nnet-gmm-mixup --mix-up $numleaves $dir/1.mdl $dir/1.occs $dir/1.mdl
  rm $dir/treeacc $dir/1.occs
fi
if [ $stage -le -1 ]; then
  echo "$0: converting alignments from $alidir to use current tree"
  $cmd JOB=1:$nj $dir/log/convert.JOB.log \
    nnet-convert-ali $alidir/final.mdl $dir/1.mdl $dir/tree ark:$alidir/ali.JOB.ark ark:$dir/ali.JOB.ark
fi
