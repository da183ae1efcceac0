"""The model: YAML config, the network and its layers, natural gradient, model files, partitioning."""
