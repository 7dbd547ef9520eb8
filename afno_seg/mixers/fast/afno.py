"""The fast form of :class:`~afno_seg.mixers.afno.AFNOMixer`, tested equal to its formula.

:func:`fused_afno`: the split-shrink mixer as one autograd function with a hand-written backward
(about half the memory traffic of the formula on CPU, ``BENCHMARKS.md``).
"""
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .transforms import transposed_copy

__all__ = ['fused_afno']


def _block_matrix(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """Released layout ``(2, k, d_in, d_out)`` -> complex ``(k, d_out, d_in)``, channels-first."""
    return torch.complex(weight[0].to(dtype), weight[1].to(dtype)).transpose(1, 2)


def _complex_bias(bias: Tensor) -> Tensor:
    """Released layout ``(2, k, d)`` -> complex ``(k, d, 1)``."""
    return torch.complex(bias[0], bias[1]).unsqueeze(-1)


def _halve_edge_columns_(modes: Tensor, cols: int, width: int) -> None:
    """Halve in place the kept columns of ``(k, d, B*rows*cols)`` modes whose Hermitian weight is
    1 (column 0, and the Nyquist column of an even ``width``): the parameter gradients are then
    twice the sum over the modes."""
    grid = modes.view(*modes.shape[:2], -1, cols)
    edges = grid[..., ::cols - 1] if width % 2 == 0 and cols == width // 2 + 1 and cols > 1 \
        else grid[..., :1]
    edges.mul_(0.5)


def _released_layout_grad(conj_half_grad: Tensor) -> Tensor:
    """Gradient of a complex parameter from ``conj`` of half of it -> real ``(2, ...)``."""
    return torch.stack((conj_half_grad.real, conj_half_grad.imag.neg())).mul_(2)


def _tokens_to_channel_rows(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` -> ``(C, B, H, W)``, one 2-D transpose: a block's modes of the
    whole batch are then one matrix."""
    batch, tokens, channels = x.shape
    return transposed_copy(x.reshape(1, batch * tokens, channels)).view(channels, batch, *hw_shape)


def _channel_rows_to_tokens(grid: Tensor) -> Tensor:
    """``(C, B, H, W)`` -> tokens ``(B, H*W, C)``."""
    channels, batch = grid.shape[:2]
    return transposed_copy(grid.reshape(1, channels, -1)).view(batch, -1, channels)


class _FusedAFNO(torch.autograd.Function):
    """Forward: per block one GEMM per layer on ``(d, B*M)`` mode matrices, ReLU and shrink in
    place. Backward in ``conj`` of the gradients (no conjugated GEMM operand): for
    ``a = M z + b``, ``conj(dz) = M^T conj(da)`` and ``conj(dM) = conj(da) z^T``; the input path
    needs no Hermitian weights, the parameter path halves the edge columns."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, hw_shape, band, threshold, keep_for_backward):
        blocks = w1.shape[1]
        modes = band.gather(torch.fft.rfft2(_tokens_to_channel_rows(x, hw_shape), norm='ortho'))
        tokens = modes.view(blocks, -1, modes[0].numel())  # (k, d, B*M)
        matrix1 = _block_matrix(w1, x.dtype).contiguous()
        matrix2 = _block_matrix(w2, x.dtype).contiguous()
        hidden = torch.bmm(matrix1, tokens).add_(_complex_bias(b1))
        torch.view_as_real(hidden).relu_()
        out = torch.bmm(matrix2, hidden).add_(_complex_bias(b2))
        out_real = torch.view_as_real(out)
        torch.ops.aten.softshrink.out(out_real, threshold, out=out_real)
        if keep_for_backward:
            ctx.save_for_backward(tokens, hidden, out, matrix1, matrix2)
        ctx.hw_shape, ctx.band = hw_shape, band
        mixed = torch.fft.irfft2(band.scatter(out.view(modes.shape)), s=hw_shape, norm='ortho')
        return _channel_rows_to_tokens(mixed).add_(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        tokens, hidden, out, matrix1, matrix2 = ctx.saved_tensors
        hw_shape, band = ctx.hw_shape, ctx.band
        width, cols = hw_shape[1], band.n_cols
        spectrum = band.gather(torch.fft.rfft2(_tokens_to_channel_rows(grad_out, hw_shape),
                                               norm='ortho'))
        grad = spectrum.view(tokens.shape)
        grad_real = torch.view_as_real(grad)
        torch.ops.aten.softshrink_backward.grad_input(grad_real, torch.view_as_real(out), 0.0,
                                                      grad_input=grad_real)
        grad.conj_physical_()
        grad_hidden = torch.bmm(matrix2.mT, grad)
        hidden_real = torch.view_as_real(grad_hidden)
        torch.ops.aten.threshold_backward.grad_input(hidden_real, torch.view_as_real(hidden), 0,
                                                     grad_input=hidden_real)
        _halve_edge_columns_(grad, cols, width)
        grad_m2, grad_b2 = torch.bmm(hidden, grad.mT), grad.sum(-1)
        # Into the dead rfft2(dY) buffer: one large allocation fewer.
        torch.bmm(matrix1.mT, grad_hidden, out=grad).conj_physical_()
        _halve_edge_columns_(grad_hidden, cols, width)
        grad_m1, grad_b1 = torch.bmm(tokens, grad_hidden.mT), grad_hidden.sum(-1)
        del grad_hidden, hidden_real, grad_real
        grad_x = torch.fft.irfft2(band.scatter(spectrum), s=hw_shape, norm='ortho')
        del grad, spectrum
        return (_channel_rows_to_tokens(grad_x).add_(grad_out), _released_layout_grad(grad_m1),
                _released_layout_grad(grad_b1), _released_layout_grad(grad_m2),
                _released_layout_grad(grad_b2), None, None, None, None)


def fused_afno(x: Tensor, weights: tuple[Tensor, ...], hw_shape: tuple[int, int], band,
               threshold: float) -> Tensor:
    """Split-shrink AFNO, ``x + irfft2(S(ReLU(z W1 + b1) W2 + b2))``; weights released layout."""
    weights = [w.to(x.dtype) for w in weights]
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in [x, *weights])
    return _FusedAFNO.apply(x, *weights, hw_shape, band, threshold, keep)
