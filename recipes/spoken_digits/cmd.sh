# How jobs are run (Kaldi's cmd.sh). Local machine by default; for a cluster use e.g.
#   export train_cmd="nnet-queue slurm --mem 2G"     or     export train_cmd="nnet-queue sge --mem 2G"
# A train_cmd already in the environment wins, so tests and users can switch without editing.
export train_cmd="${train_cmd:-nnet-queue local}"
