import click

from nnet_tools.model import config, model_io
from nnet_tools.cli.common import program


@click.command()
@click.argument("model")
@program("nnet-info")
def main(model):
    """Print a model's context, parameter count and layers (nnet3-info).

    \b
    Example:
      nnet-info exp/nnet/final.mdl
    """
    net = model_io.load(model)
    print(f"left-context: {net.left_context}")
    print(f"right-context: {net.right_context}")
    print(f"num-parameters: {sum(p.numel() for p in net.parameters())}")
    print("modulus: 1")
    print(f"input-node name=input dim={net.input_dim} splice={','.join(map(str, net.config['splice']))}")
    for name, affine in net.updatable():
        dout, din = affine.weight.shape
        l2 = f", l2-regularize={affine.l2_regularize:g}" if affine.l2_regularize else ""
        print(f"component name={name}.affine type={'NaturalGradient' if affine.ng_mode else ''}AffineComponent, "
              f"input-dim={din}, output-dim={dout}, max-change={affine.max_change}, "
              f"learning-rate-factor={affine.learning_rate_factor}{l2}, natural-gradient={affine.ng_mode}, "
              f"param-rms={affine.weight.pow(2).mean().sqrt().item():.4g}")
    scale = net.layers[-1].presoftmax_scale
    if scale is not None:  # Kaldi's FixedScaleComponent before the output's softmax
        print(f"component name={net.layers[-1].name}.presoftmax-scale type=FixedScaleComponent, dim={len(scale)}, "
              f"scale-min={scale.min().item():.4g}, scale-max={scale.max().item():.4g}")
    print(config.to_yaml(net.config), end="")
