"""Natural-gradient SGD (Kaldi nnet3's online NG and nnet2's simple NG) in pure PyTorch."""
from nnet_tools.model.ng.linear import ng_linear
from nnet_tools.model.ng.online import OnlineNaturalGradient
from nnet_tools.model.ng.simple import SimpleNaturalGradient


def default_ranks(din, dout):
    """Kaldi's NaturalGradientAffineComponent ranks: (min(20, (Din+1)/2), min(80, (Dout+1)/2))."""
    return min(20, (din + 1) // 2), min(80, (dout + 1) // 2)


__all__ = ["OnlineNaturalGradient", "SimpleNaturalGradient", "ng_linear", "default_ranks"]
