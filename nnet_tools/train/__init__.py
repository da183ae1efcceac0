"""Training: one job, max-change, minibatches, the schedule (incl. shrink), the dropout schedule,
averaging, combination."""
