"""The fast form of :class:`~afno_seg.mixers.afno.AFNOMixer` (:func:`afno_fast`), tested equal to
its formula: the split-shrink mixer as one ``torch.library`` op with a hand-written backward (an
op too), about half the formula's memory traffic on CPU (``BENCHMARKS.md``)."""
from dataclasses import astuple

import torch
from torch import Tensor
from torch.library import custom_op

from ..spectral import SpectralBand
from .transforms import transposed_copy

__all__ = ['afno_fast']


def _block_matrix(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """Released layout ``(2, k, d_in, d_out)`` -> complex ``(k, d_out, d_in)``, channels-first."""
    return torch.complex(weight[0].to(dtype), weight[1].to(dtype)).transpose(1, 2)


def _halve_edge_columns_(modes: Tensor, cols: int, width: int) -> None:
    """Halve in place the columns of ``(k, d, B*rows*cols)`` modes of Hermitian weight 1 (0, and
    Nyquist of an even ``width``): the parameter gradients are then twice the sum over modes."""
    grid = modes.view(*modes.shape[:2], -1, cols)
    edges = grid[..., ::cols - 1] if width % 2 == 0 and cols == width // 2 + 1 and cols > 1 \
        else grid[..., :1]
    edges.mul_(0.5)


def _released_layout_grad(conj_half_grad: Tensor) -> Tensor:
    """Gradient of a complex parameter from ``conj`` of half of it -> real ``(2, ...)``."""
    return torch.stack((conj_half_grad.real, conj_half_grad.imag.neg())).mul_(2)


def _tokens_to_channel_rows(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` -> ``(C, B, H, W)``: a block's modes of the batch are one matrix."""
    batch, tokens, channels = x.shape
    return transposed_copy(x.reshape(1, batch * tokens, channels)).view(channels, batch, *hw_shape)


def _channel_rows_to_tokens(grid: Tensor) -> Tensor:
    """``(C, B, H, W)`` -> tokens ``(B, H*W, C)``."""
    channels, batch = grid.shape[:2]
    return transposed_copy(grid.reshape(1, channels, -1)).view(batch, -1, channels)


@custom_op('afno_seg::fused_afno', mutates_args=())
def _fused(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, band: list[int],
           threshold: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per block one GEMM per layer on ``(d, B*M)`` mode matrices, ReLU and shrink in place:
    ``(out tokens, modes, hidden, pre-irfft2 modes)``, the last three kept for the backward."""
    band, blocks = SpectralBand(*band), w1.shape[1]
    hw_shape = band.height, band.width
    modes = band.gather(torch.fft.rfft2(_tokens_to_channel_rows(x, hw_shape), norm='ortho'))
    tokens = modes.reshape(blocks, -1, modes[0].numel())  # (k, d, B*M)
    matrix1, matrix2 = (_block_matrix(w, x.dtype).contiguous() for w in (w1, w2))
    hidden = torch.bmm(matrix1, tokens).add_(torch.complex(*b1).unsqueeze(-1))
    torch.view_as_real(hidden).relu_()
    out = torch.bmm(matrix2, hidden).add_(torch.complex(*b2).unsqueeze(-1))
    out_real = torch.view_as_real(out)
    torch.ops.aten.softshrink.out(out_real, threshold, out=out_real)
    mixed = torch.fft.irfft2(band.scatter(out.view(modes.shape)), s=hw_shape, norm='ortho')
    return _channel_rows_to_tokens(mixed).add_(x), tokens, hidden, out


@custom_op('afno_seg::fused_afno_backward', mutates_args=())
def _fused_backward(grad_out: Tensor, tokens: Tensor, hidden: Tensor, out: Tensor, w1: Tensor,
                    w2: Tensor, band: list[int]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """In ``conj`` of the gradients (no conjugated GEMM operand): for ``a = M z + b``,
    ``conj(dz) = M^T conj(da)`` and ``conj(dM) = conj(da) z^T``; the input path needs no
    Hermitian weights, the parameter path halves the edge columns."""
    band = SpectralBand(*band)
    hw_shape, cols = (band.height, band.width), band.n_cols
    matrix1, matrix2 = _block_matrix(w1, tokens.real.dtype), _block_matrix(w2, tokens.real.dtype)
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
    _halve_edge_columns_(grad, cols, band.width)
    grad_m2, grad_b2 = torch.bmm(hidden, grad.mT), grad.sum(-1)
    # Into the dead rfft2(dY) buffer: one large allocation fewer.
    torch.bmm(matrix1.mT, grad_hidden, out=grad).conj_physical_()
    _halve_edge_columns_(grad_hidden, cols, band.width)
    grad_m1, grad_b1 = torch.bmm(tokens, grad_hidden.mT), grad_hidden.sum(-1)
    del grad_hidden, hidden_real, grad_real
    grad_x = torch.fft.irfft2(band.scatter(spectrum), s=hw_shape, norm='ortho')
    del grad, spectrum
    return (_channel_rows_to_tokens(grad_x).add_(grad_out), _released_layout_grad(grad_m1),
            _released_layout_grad(grad_b1), _released_layout_grad(grad_m2),
            _released_layout_grad(grad_b2))


@_fused.register_fake
def _(x, w1, b1, w2, b2, band, threshold):
    band, (_, blocks, block, hidden) = SpectralBand(*band), w1.shape
    modes = x.new_empty(blocks, block, x.shape[0] * band.num_modes, dtype=x.dtype.to_complex())
    return x.new_empty(x.shape), modes, modes.new_empty(blocks, hidden, modes.shape[-1]), \
        torch.empty_like(modes)


_fused_backward.register_fake(lambda grad_out, tokens, hidden, out, w1, w2, band: (
    grad_out.new_empty(grad_out.shape),
    *(w.new_empty(shape) for w in (w1, w2) for shape in (w.shape, w.shape[:2] + w.shape[3:]))))


def _save(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*output[1:], inputs[1], inputs[3])
    ctx.band = inputs[5]


_fused.register_autograd(  # grad None: an undefined gradient (gradcheck tests that case)
    lambda ctx, grad, *_: (None,) * 7 if grad is None else
    (*_fused_backward(grad, *ctx.saved_tensors, ctx.band), None, None), setup_context=_save)


def afno_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Split-shrink AFNO, ``x + irfft2(S(ReLU(z W1 + b1) W2 + b2))``, as :func:`_fused`; the
    magnitude shrink: the formula on adjoint-gradient transforms (:mod:`.transforms`)."""
    if mixer.shrink != 'split':
        return mixer.formula(x, hw_shape, fast=True)
    return _fused(x, *(w.to(x.dtype) for w in mixer.weights()),
                  list(astuple(mixer.band(hw_shape))), mixer.sparsity_threshold)[0]
