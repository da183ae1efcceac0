"""nnet-tools: Kaldi-style parallel training of DNNs with natural-gradient SGD and averaging."""

__version__ = "0.1.0"
