"""What runs inside the training programs: one job's loop (nnet-train-one-job), max-change,
minibatches, averaging (nnet-average-models), combination (nnet-combine), outer optimizers
(nnet-outer-step)."""
