"""What two models must share to be averaged, combined or compared (nnet-average-models,
nnet-combine, nnet-outer-step, nnet-show-progress), and what every model of one training run
shares (the driver checks a model it resumes from against its run's)."""
import hashlib
import json

import torch

from nnet_tools.model.nnet import Nnet


def structure_of(config, keys):
    """What must agree for models to be averaged: the config without dropout proportions (a
    dropout schedule changes them between iterations; the result keeps the first model's) and
    the stored tensors (e.g. only one has a presoftmax scale)."""
    layers = [{k: v for k, v in layer.items() if k != "dropout-proportion"} for layer in config["layers"]]
    return {**config, "layers": layers}, list(keys)


def structure(model):
    """structure_of a loaded model: equal for two models that can be averaged or compared."""
    return structure_of(model.config, model.state_dict().keys())


def fingerprint(blob):
    """The parameter count and a hash of structure_of with every tensor's shape, of a model file's
    dict (model_io.read): the same for all models of one run, whatever their iteration."""
    with torch.device("meta"):   # the config's shapes, nothing allocated
        params = sum(p.numel() for p in Nnet(blob["config"]).parameters())
    config, keys = structure_of(blob["config"], blob["state"].keys())
    shapes = [(k, list(blob["state"][k].shape)) for k in keys]
    digest = hashlib.sha256(json.dumps([config, shapes], sort_keys=True, default=str).encode()).hexdigest()
    return {"num-params": int(params), "structure": digest[:16]}
