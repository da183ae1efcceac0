"""Model evaluation inside the programs: forward passes over tables (nnet-compute), objective
and accuracy over egs (nnet-compute-prob, nnet-combine), model summaries (nnet-info) and
per-layer parameter change (nnet-show-progress)."""
