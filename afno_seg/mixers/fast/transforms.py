"""Fast transforms of the spectral mixers' training form (the maths is in :mod:`..spectral`).

Each computes what the plain ``torch.fft`` formula computes, with a cheaper backward on CPU, and
is tested equal to it in float64 (``tests/test_mixer_contract.py``); why each is faster is
measured in ``BENCHMARKS.md`` ("Spectral mixers on CPU"). The transforms, AFNO's fused function
and the whole of FNO (:func:`fno_fast`) are ``torch.library`` ops (``afno_seg::*``): one opaque
node each to torch.compile, eager kernels in a compiled graph without a graph break (inductor has
no code generation for complex operators and ran them slower in many pieces, with copies around
each). GFN's filter and FNet (:func:`fnet_fast`) are traced: inductor fuses their real glue.

Adjoint-gradient transforms (:func:`tokens_to_spectrum`, :func:`spectrum_to_grid`): for
``Z = rfft2(X)`` the gradient is ``irfft2(w * dZ)``, for ``Y = irfft2(Z)`` it is ``rfft2(dY) / w``
(:func:`hermitian_column_weight`), layout copies one 2-D transpose per image
(:func:`transposed_copy`). GFN's filter and the dynamic filter's with a written-out backward
(:func:`gfn_fast`, :func:`dff_fast`).
"""
from dataclasses import astuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.library import custom_op

from ..spectral import SpectralBand

__all__ = ['dff_fast', 'fnet_fast', 'fno_fast', 'gfn_fast', 'hermitian_column_weight',
           'irfft2_to_tokens', 'rfft2_of_tokens', 'spectrum_to_grid', 'tokens_to_spectrum',
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
    """``irfft2(rfft2(X) * K)``, ``K`` one filter ``(C, H, W//2+1)`` (GFN) or one per image
    ``(B, C, H, W//2+1)`` (the dynamic filter); with ``G = rfft2(dY)``: ``dX = irfft2(G
    conj(K))`` (the column weights of the two adjoints cancel), ``dK = G conj(Z) / w``, summed
    over the images for a shared ``K``. Compiled no slower."""

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
            grad_kernel = grad * spectrum.conj()
            if kernel.dim() < grad.dim():
                grad_kernel = grad_kernel.sum(0)
            grad_kernel = grad_kernel.div_(_column_weight(ctx, grad))
        if ctx.needs_input_grad[0]:
            grad_x = irfft2_to_tokens(grad.mul_(kernel.conj()), ctx.hw_shape)
        return grad_x, grad_kernel, None


def gfn_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """GFN's ``irfft2(rfft2(x) * kernel)`` with its written-out backward."""
    return _SpectralFilter.apply(x, mixer.kernel(hw_shape, x.dtype), tuple(hw_shape))


def dff_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """The dynamic filter's formula with :class:`_SpectralFilter` for the transforms and its
    per-image product (:class:`afno_seg.mixers.dff.DynamicFilterMixer`)."""
    return mixer.project(_SpectralFilter.apply(mixer.expand(x), mixer.routed_filter(x, hw_shape),
                                               tuple(hw_shape)))


def _mode_matrix(spectrum: Tensor, band: SpectralBand) -> Tensor:
    """``(B, C, H, W//2+1)`` -> the band's modes as ``(M, B, C)`` (one matrix a mode)."""
    modes = band.gather(spectrum)
    return modes.reshape(*modes.shape[:2], -1).permute(2, 0, 1)


def _mode_matrix_to_tokens(modes: Tensor, band: SpectralBand) -> Tensor:
    """``(M, B, C)`` modes of the band (0 elsewhere) -> ``irfft2`` tokens ``(B, H*W, C)``."""
    grid = modes.permute(1, 2, 0).reshape(*modes.shape[1:], band.n_rows, band.n_cols)
    return irfft2_to_tokens(band.scatter(grid), (band.height, band.width))


@custom_op('afno_seg::fno', mutates_args=())
def _fno(x: Tensor, weight: Tensor, band: list[int]) -> tuple[Tensor, Tensor]:
    """FNO's ``irfft2(Z W)`` on the band's modes ``Z (M, B, C)``, ``W (M, C, D)``: ``(tokens,
    Z)``, Z kept for the backward. One op: inductor ran the glue between transforms slower."""
    band = SpectralBand(*band)
    modes = _mode_matrix(rfft2_of_tokens(x, (band.height, band.width)), band).contiguous()
    return _mode_matrix_to_tokens(torch.bmm(modes, weight), band), modes


@custom_op('afno_seg::fno_backward', mutates_args=())
def _fno_backward(grad: Tensor, modes: Tensor, weight: Tensor,
                  band: list[int]) -> tuple[Tensor, Tensor]:
    """With ``G`` the band of ``rfft2(dY)``: ``dX = irfft2(G W^H)`` (the adjoints' column
    weights cancel), ``dW = Z^H G / w``."""
    band = SpectralBand(*band)
    grad_modes = _mode_matrix(rfft2_of_tokens(grad, (band.height, band.width)), band)
    grad_x = _mode_matrix_to_tokens(torch.bmm(grad_modes, weight.mH), band)
    weight_of_mode = hermitian_column_weight(band.width, band.n_cols, dtype=grad.dtype,
                                             device=grad.device).repeat(band.n_rows)
    return grad_x, torch.bmm(modes.mH, grad_modes / weight_of_mode[:, None, None])


_fno.register_fake(lambda x, weight, band: (x.new_empty(x.shape), weight.new_empty(
    SpectralBand(*band).num_modes, x.shape[0], x.shape[-1])))
_fno_backward.register_fake(lambda grad, modes, weight, band: (grad.new_empty(grad.shape),
                                                                 weight.new_empty(weight.shape)))


def _save_fno(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(output[1], inputs[1])
    ctx.band = inputs[2]


_fno.register_autograd(lambda ctx, grad, _: (*_fno_backward(grad, *ctx.saved_tensors, ctx.band),
                                             None), setup_context=_save_fno)


def fno_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """FNO's formula as the op :func:`_fno`, its backward written out."""
    band = mixer.band(hw_shape)
    return _fno(x, mixer.weight_at(band, x.dtype), list(astuple(band)))[0]


class _FourierReal(torch.autograd.Function):
    """FNet's ``Re(F X)`` (``hartley``: ``Re - Im``) over ``(H, W, C)`` of tokens ``(B, H*W, C)``,
    from the half spectrum (``Y[-k] = conj Y[k]``, real X). Both are symmetric matrices: the
    backward is the same transform. Traced, not an op: inductor fuses the mirroring into one
    kernel (compiled faster than eager)."""

    @staticmethod
    def forward(ctx, x: Tensor, hw_shape: tuple[int, int], hartley: bool) -> Tensor:
        ctx.hw_shape, ctx.hartley = hw_shape, hartley
        spectrum = torch.fft.rfftn(x.reshape(x.shape[0], *hw_shape, x.shape[-1]), dim=(1, 2, 3),
                                   norm='ortho')
        real, imag = spectrum.real, spectrum.imag
        head, mirrored = (real - imag, real + imag) if hartley else (real, real)
        tail = mirrored[..., 1:(x.shape[-1] + 1) // 2].flip((1, 2, 3)).roll((1, 1), (1, 2))
        return torch.cat([head, tail], -1).flatten(1, 2)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return _FourierReal.apply(grad, ctx.hw_shape, ctx.hartley), None, None


def fnet_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """FNet's formula from the half spectrum, its own backward (:class:`_FourierReal`)."""
    return _FourierReal.apply(x, tuple(hw_shape), mixer.transform == 'hartley')
