"""The driver side: what steps/train_dnn.py and steps/train_partitioned.py run in their own
process. The outer loop (plan, launch, collect, average, diagnostics, cleanup, combine), its
resume and retry policy, the run manifest and lock, the launcher that sends programs through
$cmd, the training options and schedule. Everything here starts programs; nothing here trains."""
