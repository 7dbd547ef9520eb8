"""The fast form of :class:`~afno_seg.mixers.msca.MSCAMixer` (:func:`msca_fast`), tested equal to
its formula: mmseg's arithmetic on the token layout (1x1 convolutions as linear layers, depth-wise
ones on a channels-last view: no copy), depth-wise gradients as forward convolutions: PyTorch's CPU
weight gradient of a depth-wise convolution (oneDNN) is several times slower (``BENCHMARKS.md``)."""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ['msca_fast']


class _DepthwiseConv(torch.autograd.Function):
    """``conv2d(x, w, b, padding=(k - 1) / 2, groups=C)``, odd kernels; backward in the gradient's
    dtype: ``dx = conv2d(dy, flip(w))``, ``db = sum(dy)``, ``dw[c] = conv2d(pad(x)[c], dy[c])``
    summed over the batch (oneDNN's own for a column kernel no taller than the grid: faster)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, padding: tuple[int, int]) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.padding = padding
        return F.conv2d(x, weight, bias, padding=padding, groups=x.shape[1])

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        (pad_h, pad_w), (batch, channels, height, width) = ctx.padding, x.shape
        inputs, kernel = x.to(grad.dtype), weight.to(grad.dtype)
        grad_x = F.conv2d(grad, kernel.flip(2, 3), padding=ctx.padding, groups=channels)
        if weight.shape[3] == 1 < weight.shape[2] <= height:  # a column: oneDNN's own is fast
            grad_weight = torch.nn.grad.conv2d_weight(inputs, weight.shape, grad,
                                                      padding=ctx.padding, groups=channels)
        else:
            padded = inputs.new_zeros(batch, channels, height + 2 * pad_h, width + 2 * pad_w)
            padded[..., pad_h:pad_h + height, pad_w:pad_w + width] = inputs
            grad_weight = F.conv2d(padded.view(1, batch * channels, *padded.shape[2:]),
                                   grad.contiguous().view(batch * channels, 1, height, width),
                                   groups=batch * channels).view(batch, *weight.shape).sum(0)
        return (grad_x.to(x.dtype), grad_weight.to(weight.dtype),
                grad.sum((0, 2, 3)).to(weight.dtype), None)


def msca_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``MSCAMixer.formula`` on ``(B, N, C)`` tokens, in mmseg's order of operations."""
    unit = mixer.spatial_gating_unit

    def pointwise(conv: nn.Conv2d, tokens: Tensor) -> Tensor:
        return F.linear(tokens, conv.weight.flatten(1), conv.bias)

    def depthwise(conv: nn.Conv2d, grid: Tensor) -> Tensor:
        return _DepthwiseConv.apply(grid, conv.weight, conv.bias, conv.padding)

    gate = mixer.activation(pointwise(mixer.proj_1, x))
    strips = depthwise(unit.conv0, gate.unflatten(1, hw_shape).permute(0, 3, 1, 2))
    attention = strips
    for branch in range(3):
        first, second = (getattr(unit, f'conv{branch}_{i}') for i in (1, 2))
        attention = attention + depthwise(second, depthwise(first, strips))
    attention = attention.permute(0, 2, 3, 1).reshape(x.shape)
    return pointwise(mixer.proj_2, pointwise(unit.conv3, attention) * gate) + x
