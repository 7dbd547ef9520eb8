"""The fast form of :class:`~afno_seg.mixers.aff.AFFMixer` (:func:`aff_fast`), tested equal to its
formula: one ``torch.library`` op with a hand-written backward (an op too), per block one GEMM
a layer on ``(d, B*M)`` mode matrices as AFNO's (:mod:`.afno`). Faster than the formula on a
large grid, and one opaque node to torch.compile: inductor has no complex code generation and ran
the formula slower than eager (``BENCHMARKS.md``)."""
import torch
from torch import Tensor
from torch.library import custom_op

from .afno import (
    _block_matrix,
    _channel_rows_to_tokens,
    _halve_edge_columns_,
    _released_layout_grad,
    _tokens_to_channel_rows,
)

__all__ = ['aff_fast']


def _activate(pre: Tensor, act: str) -> Tensor:
    """``act`` on the real and imaginary parts of complex ``pre``, a new tensor."""
    real = torch.view_as_real(pre)
    return torch.view_as_complex(torch.relu(real) if act == 'relu' else
                                 torch.nn.functional.silu(real))


@custom_op('afno_seg::fused_aff', mutates_args=())
def _fused(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, hw_shape: list[int],
           act: str, threshold: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(out tokens, modes Z, hidden pre-activation, mask m)``, the last three ``(k, ., B*M)``
    and kept for the backward."""
    blocks = w1.shape[1]
    spectrum = torch.fft.rfft2(_tokens_to_channel_rows(x, hw_shape), norm='ortho')
    modes = spectrum.view(blocks, -1, spectrum[0].numel())  # (k, d, B*M)
    matrix1, matrix2 = (_block_matrix(w, x.dtype).contiguous() for w in (w1, w2))
    pre = torch.bmm(matrix1, modes).add_(torch.complex(*b1).unsqueeze(-1))
    mask = torch.bmm(matrix2, _activate(pre, act)).add_(torch.complex(*b2).unsqueeze(-1))
    mask_real = torch.view_as_real(mask)
    torch.ops.aten.softshrink.out(mask_real, threshold, out=mask_real)
    mixed = torch.fft.irfft2((mask * modes).view(spectrum.shape), s=hw_shape, norm='ortho')
    return _channel_rows_to_tokens(mixed).add_(x), modes, pre, mask


@custom_op('afno_seg::fused_aff_backward', mutates_args=())
def _fused_backward(grad_out: Tensor, modes: Tensor, pre: Tensor, mask: Tensor, w1: Tensor,
                    w2: Tensor, hw_shape: list[int],
                    act: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """In ``conj`` of the gradients, as AFNO's: with ``G = conj(rfft2(dY))``, ``conj(dm) = G Z``,
    ``conj(dZ) = G m + W1^T conj(d pre)``; the input path needs no Hermitian weights, the
    parameter path halves the edge columns."""
    matrix1, matrix2 = _block_matrix(w1, modes.real.dtype), _block_matrix(w2, modes.real.dtype)
    cols, width = hw_shape[1] // 2 + 1, hw_shape[1]
    spectrum = torch.fft.rfft2(_tokens_to_channel_rows(grad_out, hw_shape), norm='ortho')
    grad = spectrum.view(modes.shape).conj_physical_()
    grad_mask = grad * modes
    grad_mask_real = torch.view_as_real(grad_mask)  # soft-shrink passes where m != 0
    torch.ops.aten.softshrink_backward.grad_input(grad_mask_real, torch.view_as_real(mask), 0.0,
                                                  grad_input=grad_mask_real)
    grad.mul_(mask)  # conj(dZ) through the product; the MLP's share is added below
    grad_pre = torch.bmm(matrix2.mT, grad_mask)
    grad_pre_real, pre_real = torch.view_as_real(grad_pre), torch.view_as_real(pre)
    if act == 'relu':
        torch.ops.aten.threshold_backward.grad_input(grad_pre_real, pre_real, 0,
                                                     grad_input=grad_pre_real)
    else:
        torch.ops.aten.silu_backward.grad_input(grad_pre_real, pre_real,
                                                grad_input=grad_pre_real)
    _halve_edge_columns_(grad_mask, cols, width)
    grad_m2, grad_b2 = torch.bmm(_activate(pre, act), grad_mask.mT), grad_mask.sum(-1)
    del grad_mask, grad_mask_real
    grad.baddbmm_(matrix1.mT, grad_pre).conj_physical_()
    _halve_edge_columns_(grad_pre, cols, width)
    grad_m1, grad_b1 = torch.bmm(modes, grad_pre.mT), grad_pre.sum(-1)
    del grad_pre, grad_pre_real
    grad_x = torch.fft.irfft2(spectrum, s=hw_shape, norm='ortho')
    del grad, spectrum
    return (_channel_rows_to_tokens(grad_x).add_(grad_out), _released_layout_grad(grad_m1),
            _released_layout_grad(grad_b1), _released_layout_grad(grad_m2),
            _released_layout_grad(grad_b2))


@_fused.register_fake
def _(x, w1, b1, w2, b2, hw_shape, act, threshold):
    _, blocks, block, hidden = w1.shape
    num_modes = x.shape[0] * hw_shape[0] * (hw_shape[1] // 2 + 1)
    modes = x.new_empty(blocks, block, num_modes, dtype=x.dtype.to_complex())
    return x.new_empty(x.shape), modes, modes.new_empty(blocks, hidden, num_modes), \
        torch.empty_like(modes)


_fused_backward.register_fake(lambda grad_out, modes, pre, mask, w1, w2, hw_shape, act: (
    grad_out.new_empty(grad_out.shape),
    *(w.new_empty(shape) for w in (w1, w2) for shape in (w.shape, w.shape[:2] + w.shape[3:]))))


def _save(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*output[1:], inputs[1], inputs[3])
    ctx.hw_shape, ctx.act = inputs[5], inputs[6]


_fused.register_autograd(  # grad None: an undefined gradient
    lambda ctx, grad, *_: (None,) * 8 if grad is None else
    (*_fused_backward(grad, *ctx.saved_tensors, ctx.hw_shape, ctx.act), None, None, None),
    setup_context=_save)


def aff_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """AFF, ``x + irfft2(S(act(z W1 + b1) W2 + b2) * Z)``, as :func:`_fused`."""
    return _fused(x, *(w.to(x.dtype) for w in mixer.weights()), list(hw_shape), mixer.act,
                  mixer.sparsity_threshold)[0]
