"""The dynamic filter's ``fast`` form (:class:`afno_seg.mixers.dff.DynamicFilterMixer`): its
per-image spectral product with a written-out backward, as GFN's (:mod:`.transforms`)."""
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .transforms import hermitian_column_weight, irfft2_to_tokens, rfft2_of_tokens

__all__ = ['dff_fast']


class _RoutedFilter(torch.autograd.Function):
    """``irfft2(rfft2(U) * G)`` with a filter ``G (B, D, H, W//2+1)`` per image; with
    ``R = rfft2(dY)``: ``dU = irfft2(R conj(G))`` (the adjoints' column weights cancel),
    ``dG = R conj(Z) / w``."""

    @staticmethod
    def forward(ctx, u: Tensor, kernel: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = rfft2_of_tokens(u, hw_shape)
        ctx.hw_shape = hw_shape
        ctx.save_for_backward(spectrum if ctx.needs_input_grad[1] else None, kernel)
        return irfft2_to_tokens(spectrum * kernel, hw_shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        spectrum, kernel = ctx.saved_tensors
        grad = rfft2_of_tokens(grad_out, ctx.hw_shape)
        grad_u = grad_kernel = None
        if ctx.needs_input_grad[1]:
            grad_kernel = (grad * spectrum.conj()).div_(hermitian_column_weight(
                ctx.hw_shape[1], dtype=grad.real.dtype, device=grad.device))
        if ctx.needs_input_grad[0]:
            grad_u = irfft2_to_tokens(grad.mul_(kernel.conj()), ctx.hw_shape)
        return grad_u, grad_kernel, None


def dff_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """The formula with :class:`_RoutedFilter` for the transforms and the product."""
    return mixer.project(_RoutedFilter.apply(mixer.expand(x), mixer.routed_filter(x, hw_shape),
                                             tuple(hw_shape)))
