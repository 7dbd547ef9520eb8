"""The split-shrink AFNO mixer as one autograd function with a hand-written backward.

The maths is :class:`~afno_seg.mixers.afno.AFNOMixer`'s (``fused=True``, its default); this
module only decides layout, buffer reuse and the order of the backward's steps, and is tested
against the mixer's composed path (``fused=False``) in float64 (``tests/test_benchmarks.py``).
"""
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .spectral import transposed_copy

__all__ = ['FusedAFNO', 'block_matrix', 'complex_bias']


def block_matrix(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """Released layout ``(2, k, d_in, d_out)`` -> complex ``(k, d_out, d_in)``, channels-first."""
    return torch.complex(weight[0].to(dtype), weight[1].to(dtype)).transpose(1, 2)


def complex_bias(bias: Tensor) -> Tensor:
    """Released layout ``(2, k, d)`` -> complex ``(k, d, 1)``."""
    return torch.complex(bias[0], bias[1]).unsqueeze(-1)


def _halve_edge_columns_(modes: Tensor, cols: int, width: int) -> None:
    """Halve, in place, the kept half-spectrum columns whose Hermitian weight is 1 (column 0
    and, for even ``width``, the Nyquist column) of ``(k, d, B*rows*cols)`` modes.

    Parameter gradients sum ``(1/w) x`` over the modes (``w`` = 1/2 on every column but these,
    see :mod:`.spectral`): twice the sum after this halving. Two of ``cols`` columns, strided.
    """
    grid = modes.view(*modes.shape[:2], -1, cols)
    edges = grid[..., ::cols - 1] if width % 2 == 0 and cols == width // 2 + 1 and cols > 1 \
        else grid[..., :1]
    edges.mul_(0.5)


def _released_layout_grad(conj_half_grad: Tensor) -> Tensor:
    """Gradient of a complex parameter given ``conj`` of half of it -> real ``(2, ...)``."""
    return torch.stack((conj_half_grad.real, conj_half_grad.imag.neg())).mul_(2)


def _tokens_to_channel_rows(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` -> ``(C, B, H, W)``: one 2-D transpose of the ``(B*H*W, C)``
    matrix, so that each block's modes of the whole batch are one contiguous matrix."""
    batch, tokens, channels = x.shape
    return transposed_copy(x.reshape(1, batch * tokens, channels)).view(channels, batch, *hw_shape)


def _channel_rows_to_tokens(grid: Tensor) -> Tensor:
    """``(C, B, H, W)`` -> tokens ``(B, H*W, C)`` (the inverse of the above)."""
    channels, batch = grid.shape[:2]
    return transposed_copy(grid.reshape(1, channels, -1)).view(batch, -1, channels)


class FusedAFNO(torch.autograd.Function):
    """The whole split-shrink AFNO mixer with a hand-written backward (the composed path's maths,
    about half its memory traffic on CPU).

    Layout: the grid is ``(C, B, H, W)`` (one 2-D transpose of the tokens), so block ``j``'s
    modes of the whole batch are one ``(d, B*M)`` matrix and each complex layer is one GEMM per
    block plus a broadcast bias add, weights shared over the batch without copies.

    Backward in terms of ``conj`` of the gradients (``g~ = conj(g)``), so that no GEMM operand
    needs conjugating: for ``a = M z + b``, ``g~z = M^T g~a`` and ``conj(dM) = g~a z^T``. The
    input path needs no Hermitian column weights at all (``irfft2(w . J^H(rfft2(dY) / w))`` with
    ``J^H`` acting per mode is ``irfft2(J^H(rfft2(dY)))``); only the parameter gradients do:
    twice their sum over the modes once the edge columns are halved in place
    (:func:`_halve_edge_columns_`, after the input path has used those buffers). So the
    spectrum-sized work beyond the transforms is: the GEMMs, ReLU and shrink in place, and in
    backward one fused pass for each of their masks, two in-place conjugations and the
    residual's add. Saved for backward: the modes, the hidden layer (also the ReLU mask) and the
    shrink output (whose zeros are the shrink mask).
    """

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, hw_shape, band, threshold, keep_for_backward):
        blocks = w1.shape[1]
        modes = band.gather(torch.fft.rfft2(_tokens_to_channel_rows(x, hw_shape), norm='ortho'))
        tokens = modes.view(blocks, -1, modes[0].numel())  # (k, d, B*M)
        # Contiguous matrices and the bias added after the GEMM: measured faster than baddbmm's
        # fill-then-accumulate at B3 stages 2-4 (BENCHMARKS.md).
        matrix1 = block_matrix(w1, x.dtype).contiguous()
        matrix2 = block_matrix(w2, x.dtype).contiguous()
        hidden = torch.bmm(matrix1, tokens).add_(complex_bias(b1))
        torch.view_as_real(hidden).relu_()  # split ReLU, in place on the GEMM output
        out = torch.bmm(matrix2, hidden).add_(complex_bias(b2))
        out_real = torch.view_as_real(out)
        torch._C._nn.softshrink(out_real, threshold, out=out_real)  # split soft-shrink
        if keep_for_backward:
            ctx.save_for_backward(tokens, hidden, out, matrix1, matrix2)
        ctx.hw_shape, ctx.band = hw_shape, band
        mixed = torch.fft.irfft2(band.scatter(out.view(modes.shape)), s=hw_shape, norm='ortho')
        # The residual is added to the tokens, so the transposed copy of x is already freed.
        return _channel_rows_to_tokens(mixed).add_(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        tokens, hidden, out, matrix1, matrix2 = ctx.saved_tensors
        hw_shape, band = ctx.hw_shape, ctx.band
        width, cols = hw_shape[1], band.n_cols
        spectrum = band.gather(torch.fft.rfft2(_tokens_to_channel_rows(grad_out, hw_shape),
                                               norm='ortho'))  # (C, B, rows, cols), ours
        grad = spectrum.view(tokens.shape)  # rfft2(dY), the shrink output's gradient up to 1/w
        grad_real = torch.view_as_real(grad)
        # Soft-shrink: the gradient passes exactly where the output is non-zero.
        torch.ops.aten.softshrink_backward.grad_input(grad_real, torch.view_as_real(out), 0.0,
                                                      grad_input=grad_real)
        grad.conj_physical_()
        # Input path first (no Hermitian weights there), then the parameter gradients from the
        # same buffers with their edge columns halved (see _halve_edge_columns_).
        grad_hidden = torch.bmm(matrix2.mT, grad)
        hidden_real = torch.view_as_real(grad_hidden)
        torch.ops.aten.threshold_backward.grad_input(hidden_real, torch.view_as_real(hidden), 0,
                                                     grad_input=hidden_real)  # split ReLU
        _halve_edge_columns_(grad, cols, width)
        grad_m2, grad_b2 = torch.bmm(hidden, grad.mT), grad.sum(-1)  # (k, f d, d), (k, d)
        # Into the (dead) rfft2(dY) buffer: one large allocation fewer (on CPU without
        # engine.cpu_memory's cache, each one is mmap'd and page-faulted anew).
        torch.bmm(matrix1.mT, grad_hidden, out=grad).conj_physical_()  # irfft2's input
        _halve_edge_columns_(grad_hidden, cols, width)
        grad_m1, grad_b1 = torch.bmm(tokens, grad_hidden.mT), grad_hidden.sum(-1)
        del grad_hidden, hidden_real, grad_real  # free before the next large allocations
        grad_x = torch.fft.irfft2(band.scatter(spectrum), s=hw_shape, norm='ortho')
        del grad, spectrum
        return (_channel_rows_to_tokens(grad_x).add_(grad_out), _released_layout_grad(grad_m1),
                _released_layout_grad(grad_b1), _released_layout_grad(grad_m2),
                _released_layout_grad(grad_b2), None, None, None, None)
