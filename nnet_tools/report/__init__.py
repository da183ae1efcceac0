"""Reading an experiment dir's logs: Kaldi-worded log lines, per-iteration series, summaries
(nnet3_dir_info-style, accuracy.report) and plots (nnet-report)."""
