"""Fast transforms of the spectral mixers' training form (the maths is in :mod:`..spectral`).

Each computes what the plain ``torch.fft`` formula computes, with a cheaper backward on CPU, and
is tested equal to it in float64 (``tests/test_mixer_contract.py``); why each is faster is
measured in ``BENCHMARKS.md`` ("Spectral mixers on CPU"). The transforms, AFNO's fused function
and FNO's mode product are ``torch.library`` ops (``afno_seg::*``): one opaque node each to
torch.compile, eager kernels in a compiled graph without a graph break (inductor has no code
generation for complex operators and ran them slower in many pieces).

Adjoint-gradient transforms (:func:`tokens_to_spectrum`, :func:`spectrum_to_grid`): for
``Z = rfft2(X)`` the gradient is ``irfft2(w * dZ)``, for ``Y = irfft2(Z)`` it is ``rfft2(dY) / w``
(:func:`hermitian_column_weight`), layout copies one 2-D transpose per image
(:func:`transposed_copy`). GFN's filter with a written-out backward (:func:`gfn_fast`).
"""
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.library import custom_op

__all__ = ['adjoint_transforms', 'gfn_fast', 'hermitian_column_weight', 'irfft2_to_tokens',
           'mode_product', 'rfft2_of_tokens', 'spectrum_to_grid', 'tokens_to_spectrum',
           'transposed_copy']


def hermitian_column_weight(width: int, num_columns: int | None = None, *, dtype=torch.float32,
                            device=None) -> Tensor:
    """``w`` of the ``rfft2`` half-spectrum columns of a grid ``width`` wide: 1 on column 0 and
    (even ``width``) on the Nyquist column, 1/2 elsewhere; the first ``num_columns``."""
    weight = torch.full((width // 2 + 1,), 0.5, dtype=dtype, device=device)
    weight[0] = 1.0
    if width % 2 == 0:
        weight[-1] = 1.0
    return weight[:num_columns]


def transposed_copy(x: Tensor) -> Tensor:
    """``(B, P, Q) -> (B, Q, P)`` contiguous, one tiled 2-D transpose per batch entry on CPU."""
    if x.device.type != 'cpu':
        return x.transpose(1, 2).contiguous()
    out = x.new_empty(x.shape[0], x.shape[2], x.shape[1])
    for index in range(x.shape[0]):
        out[index].copy_(x[index].t())
    return out


def rfft2_of_tokens(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``rfft2`` of tokens ``(B, H*W, C)`` -> ``(B, C, H, W//2+1)``, torch autograd."""
    grid = transposed_copy(x).view(x.shape[0], x.shape[-1], *hw_shape)
    return torch.fft.rfft2(grid, norm='ortho')


def irfft2_to_tokens(spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``irfft2`` of ``(B, C, H, W//2+1)`` -> contiguous tokens ``(B, H*W, C)``."""
    grid = torch.fft.irfft2(spectrum, s=tuple(hw_shape), norm='ortho')
    return transposed_copy(grid.reshape(grid.shape[0], grid.shape[1], -1))


@custom_op('afno_seg::tokens_to_spectrum', mutates_args=())
def tokens_to_spectrum(x: Tensor, hw_shape: list[int]) -> Tensor:
    """``rfft2`` of tokens ``(B, H*W, C)`` -> ``(B, C, H, W//2+1)``; backward the adjoint."""
    return rfft2_of_tokens(x, hw_shape)


@custom_op('afno_seg::spectrum_to_grid', mutates_args=())
def spectrum_to_grid(spectrum: Tensor, hw_shape: list[int]) -> Tensor:
    """``irfft2`` of ``(B, C, H, W//2+1)`` -> grid ``(B, H, W, C)``; backward the adjoint."""
    tokens = irfft2_to_tokens(spectrum, hw_shape)
    return tokens.view(tokens.shape[0], *hw_shape, tokens.shape[-1])


def _column_weight(ctx, grad: Tensor) -> Tensor:
    return hermitian_column_weight(ctx.hw_shape[1], dtype=grad.real.dtype, device=grad.device)


def _save_hw_shape(ctx, inputs, output) -> None:  # ops' setup_context
    ctx.hw_shape = inputs[-1]


tokens_to_spectrum.register_fake(lambda x, hw_shape: x.new_empty(
    x.shape[0], x.shape[-1], hw_shape[0], hw_shape[1] // 2 + 1, dtype=x.dtype.to_complex()))
tokens_to_spectrum.register_autograd(
    lambda ctx, grad: (spectrum_to_grid(grad * _column_weight(ctx, grad), ctx.hw_shape)
                       .flatten(1, 2), None), setup_context=_save_hw_shape)
spectrum_to_grid.register_fake(lambda spectrum, hw_shape: spectrum.real.new_empty(
    spectrum.shape[0], *hw_shape, spectrum.shape[1]))
spectrum_to_grid.register_autograd(
    lambda ctx, grad: (tokens_to_spectrum(grad.flatten(1, 2), ctx.hw_shape)
                       / _column_weight(ctx, grad), None), setup_context=_save_hw_shape)


class _SpectralFilter(torch.autograd.Function):
    """``irfft2(rfft2(X) * K)``; with ``G = rfft2(dY)``: ``dX = irfft2(G conj(K))`` (the column
    weights of the two adjoints cancel), ``dK = sum_b G conj(Z) / w``. Compiled no slower."""

    @staticmethod
    def forward(ctx, x: Tensor, kernel: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = rfft2_of_tokens(x, hw_shape)
        ctx.hw_shape = hw_shape
        ctx.save_for_backward(spectrum if ctx.needs_input_grad[1] else None, kernel)
        return irfft2_to_tokens(spectrum * kernel, hw_shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        spectrum, kernel = ctx.saved_tensors
        grad = rfft2_of_tokens(grad_out, ctx.hw_shape)
        grad_kernel = grad_x = None
        if ctx.needs_input_grad[1]:
            grad_kernel = (grad * spectrum.conj()).sum(0).div_(_column_weight(ctx, grad))
        if ctx.needs_input_grad[0]:
            grad_x = irfft2_to_tokens(grad.mul_(kernel.conj()), ctx.hw_shape)
        return grad_x, grad_kernel, None


def gfn_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """GFN's ``irfft2(rfft2(x) * kernel)`` with its written-out backward."""
    return _SpectralFilter.apply(x, mixer.kernel(hw_shape, x.dtype), tuple(hw_shape))


def adjoint_transforms(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """The formula with the adjoint-gradient ``rfft2``/``irfft2`` above."""
    return mixer.formula(x, hw_shape, fast=True)


@custom_op('afno_seg::mode_product', mutates_args=())
def mode_product(z: Tensor, weight: Tensor) -> Tensor:
    """``torch.bmm`` of complex modes ``(M, B, C) @ (M, C, D)``, one node to torch.compile: at
    batch 1 inductor turns its backward into a complex broadcast product (``BENCHMARKS.md``)."""
    return torch.bmm(z, weight)


@custom_op('afno_seg::mode_product_backward', mutates_args=())
def _mode_product_backward(grad: Tensor, z: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """torch's: ``dz = g W^H``, ``dW = z^H g`` (a conjugate view into an op would be copied)."""
    return torch.bmm(grad, weight.mH), torch.bmm(z.mH, grad)


mode_product.register_fake(lambda z, weight: z.new_empty(*z.shape[:2], weight.shape[-1]))
_mode_product_backward.register_fake(lambda grad, z, weight: (z.new_empty(z.shape),
                                                              weight.new_empty(weight.shape)))
mode_product.register_autograd(
    lambda ctx, grad: _mode_product_backward(grad, *ctx.saved_tensors),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))
