"""An affine map whose weight gradient is natural-gradient preconditioned (Kaldi's
NaturalGradientAffineComponent::Update), as a torch.autograd.Function.

Forward: y = x W^T + b. Backward: the derivative passed back, grad_y W, is exact. With
X = [x, 1] (a 1 appended so the bias is a weight on a constant input) and Y = grad_y,
(X_hat, g_in) = pre_in.precondition(X), (Y_hat, g_out) = pre_out.precondition(Y), and
[grad_W, grad_b] = g_in g_out Y_hat^T X_hat, with the scale applied exactly once (folded into the
GEMM's alpha on the CPU). [x, 1] is never formed: the preconditioner handles the ones column
apart (precondition_with_ones), so no [N, Din+1] copy is made per minibatch.
torch hands us the derivative of the loss, not of Kaldi's objective; preconditioning is
linear in Y and gamma depends only on norms, so the sign carries through unchanged.
"""
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class NaturalGradientLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, pre_in, pre_out):
        ctx.save_for_backward(x, weight)
        ctx.pre_in, ctx.pre_out = pre_in, pre_out
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = torch.matmul(grad_y, weight) if need_x else None
        grad_w = grad_b = None
        if need_w or need_b:
            d_in, d_out = weight.shape[1], weight.shape[0]
            X = x.reshape(-1, d_in)
            if ctx.has_bias:  # [X, 1] preconditioned without being formed: c_hat is the 1s' column
                X_hat, c_hat, g_in = ctx.pre_in.precondition_with_ones(X, reuse=True)
            else:
                (X_hat, g_in), c_hat = ctx.pre_in.precondition(X, reuse=True), None
            # X_hat and Y_hat die with this call: the preconditioners' buffers can hold them.
            Y_hat, g_out = ctx.pre_out.precondition(grad_y.reshape(-1, d_out), reuse=True)
            scale = g_in * g_out
            if scale.device.type == "cpu":
                # A host scalar is free to read here: fold it into the GEMMs' alpha.
                alpha = float(scale)
            else:
                # On an accelerator reading it would sync: scale the smaller operand instead.
                alpha = 1.0
                if d_out <= d_in:
                    Y_hat = Y_hat * scale
                else:
                    X_hat = X_hat * scale
                    c_hat = None if c_hat is None else c_hat * scale
            zero = Y_hat.new_zeros(())  # beta=0: addmm/addmv just scale the product by alpha
            if need_w:
                grad_w = torch.addmm(zero, Y_hat.t(), X_hat, beta=0, alpha=alpha)
            if need_b:
                grad_b = torch.addmv(zero, Y_hat.t(), c_hat, beta=0, alpha=alpha)
        return grad_x, grad_w, grad_b, None, None


def ng_linear(x, weight, bias, pre_in, pre_out):
    """y = x W^T + b, with the weight/bias gradient preconditioned by pre_in (inputs with a 1
    appended) and pre_out (output derivatives). x: [..., Din], weight: [Dout, Din],
    bias: [Dout] or None (then no 1 is appended). Without a gradient to compute (no_grad,
    or frozen weight and bias) it is a plain linear map and the preconditioners are untouched.
    """
    if not torch.is_grad_enabled() or not (
            weight.requires_grad or (bias is not None and bias.requires_grad)):
        return F.linear(x, weight, bias)
    return NaturalGradientLinear.apply(x, weight, bias, pre_in, pre_out)
