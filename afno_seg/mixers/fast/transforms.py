"""Fast transforms of the spectral mixers' training form (the maths is in :mod:`..spectral`).

Each computes what the plain ``torch.fft`` formula computes, with a cheaper backward on CPU, and
is tested equal to it in float64 (``tests/test_mixer_contract.py``); why each is faster is
measured in ``BENCHMARKS.md`` ("Spectral mixers on CPU").

* Adjoint-gradient transforms (:func:`tokens_to_spectrum`, :func:`spectrum_to_grid`): for
  ``Z = rfft2(X)`` the gradient is ``irfft2(w * dZ)``, for ``Y = irfft2(Z)`` it is
  ``rfft2(dY) / w`` (:func:`hermitian_column_weight`), with channels-first layout copies done
  one 2-D transpose per image (:func:`transposed_copy`).
* GFN's filter with a written-out backward (:func:`spectral_filter`). AFNO's: :mod:`.afno`.
"""
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ['hermitian_column_weight', 'irfft2_to_tokens', 'rfft2_of_tokens', 'spectral_filter',
           'spectrum_to_grid', 'tokens_to_spectrum', 'transposed_copy']


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


class _TokensToSpectrum(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        ctx.hw_shape = hw_shape
        return rfft2_of_tokens(x, hw_shape)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.real.dtype,
                                         device=grad.device)
        return spectrum_to_grid(grad * weight, ctx.hw_shape).flatten(1, 2), None


class _SpectrumToGrid(torch.autograd.Function):

    @staticmethod
    def forward(ctx, spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        ctx.hw_shape = hw_shape
        tokens = irfft2_to_tokens(spectrum, hw_shape)
        return tokens.view(tokens.shape[0], *hw_shape, tokens.shape[-1])

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.dtype, device=grad.device)
        return tokens_to_spectrum(grad.flatten(1, 2), ctx.hw_shape) / weight, None


def tokens_to_spectrum(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``rfft2`` of tokens ``(B, H*W, C)`` -> contiguous ``(B, C, H, W//2+1)``; backward the
    adjoint transform, itself differentiable."""
    return _TokensToSpectrum.apply(x, tuple(hw_shape))


def spectrum_to_grid(spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``irfft2`` of ``(B, C, H, W//2+1)`` -> contiguous grid ``(B, H, W, C)``; backward the
    adjoint transform, itself differentiable."""
    return _SpectrumToGrid.apply(spectrum, tuple(hw_shape))


class _SpectralFilter(torch.autograd.Function):
    """``irfft2(rfft2(X) * K)``; with ``G = rfft2(dY)``: ``dX = irfft2(G conj(K))`` (the column
    weights of the two adjoints cancel), ``dK = sum_b G conj(Z) / w``."""

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
            weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.real.dtype,
                                             device=grad.device)
            grad_kernel = (grad * spectrum.conj()).sum(0).div_(weight)
        if ctx.needs_input_grad[0]:
            grad_x = irfft2_to_tokens(grad.mul_(kernel.conj()), ctx.hw_shape)
        return grad_x, grad_kernel, None


def spectral_filter(x: Tensor, kernel: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """GFN's ``irfft2(rfft2(x) * kernel)``: tokens ``(B, H*W, C)``, kernel ``(C, H, W//2+1)``."""
    return _SpectralFilter.apply(x, kernel, tuple(hw_shape))
