# The launcher every stage gets as --cmd. This machine by default; on a cluster, export train_cmd
# before running (e.g. "nnet-queue slurm --mem 4G" or "nnet-queue sge --mem 4G"): it wins over this.
export train_cmd="${train_cmd:-nnet-queue local}"
