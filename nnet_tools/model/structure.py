"""What two models must share to be averaged, combined or compared (nnet-average-models,
nnet-combine, nnet-outer-step, nnet-show-progress)."""


def structure_of(config, keys):
    """What must agree for models to be averaged: the config without dropout proportions (a
    dropout schedule changes them between iterations; the result keeps the first model's) and
    the stored tensors (e.g. only one has a presoftmax scale)."""
    layers = [{k: v for k, v in layer.items() if k != "dropout-proportion"} for layer in config["layers"]]
    return {**config, "layers": layers}, list(keys)


def structure(model):
    """structure_of a loaded model: equal for two models that can be averaged or compared."""
    return structure_of(model.config, model.state_dict().keys())
