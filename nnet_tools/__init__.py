"""nnet-tools: Kaldi-style parallel training of DNNs with natural-gradient SGD and averaging.

The package in layers, lowest first; a module imports only from its own layer or lower ones
(tests/test_layers.py holds this):

1. base: the modules at the top of the package (errors, log, fileio, dir_lock, procs, heap,
   device, cpp_stderr): error type, Kaldi-style logging, atomic writes, dir locks, processes, signals.
2. data: Kaldi tables, the egs format and its dumping, CMVN, corpus readers.
3. model: configs, networks and layers, natural gradient (model/ng), model files, partitions.
4. evaluate: forward passes and objectives over tables and egs, model summaries, progress.
5. train: what runs inside the training programs: one job, max-change, averaging, combination.
6. queue: nnet-queue's launchers (local, Slurm, Grid Engine).
7. report: reading an experiment dir's logs, summaries and plots.
8. speech: the hybrid pipeline by stage (features, lang, GMM, decoding, scoring).
9. kaldi: Kaldi's file formats beyond tables: basic object I/O, TransitionModel, nnet3 models
   (export and import, and what nnet3-compute gives for them).
10. driver: the outer loop and what only it uses (launcher, resume, retry, manifest, lock,
   options, schedule): it runs in steps/train_dnn.py's process and starts programs.
11. cli: the programs, one thin file each: option parsing and one library call.

So `ls nnet_tools` says which process runs what: cli/ holds the programs, driver/ the driver's
own code; train/ and evaluate/ run only inside programs; the other layers serve both.
docs/architecture.md says more.
"""

__version__ = "0.1.0"
