"""Training: one job, max-change, minibatches, the schedule, averaging, combination."""
