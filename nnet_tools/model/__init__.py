"""The model: YAML config, the network and its layers, natural gradient, model files, edits
(scale, dropout proportion), the presoftmax prior scale, partitioning."""
