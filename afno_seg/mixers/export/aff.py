"""AFF's export forms (:class:`~afno_seg.mixers.aff.AFFMixer`): the mask MLP and the mask product
as real arithmetic on the stacked modes (:mod:`.dft`); transforms by ``torch.fft`` (``op``) or
as matmuls (``matmul``)."""
import torch
from torch import Tensor

from ..spectral import SpectralBand, irfft2, rfft2
from .dft import Stacked, from_blocks, irfft2_grid, rfft2_grid, to_blocks

__all__ = ['aff_matmul', 'aff_op']


def _layer(z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``z W + b`` of ``(B, k, M, 2 d_in)`` (re then im) with complex ``W`` as one real matmul,
    ``[zr, zi] [[Wr, Wi], [-Wi, Wr]]``."""
    real, imag = weight.unbind(0)
    stacked = torch.cat([torch.cat([real, imag], -1), torch.cat([-imag, real], -1)], -2)
    return z @ stacked + bias.transpose(0, 1).flatten(1)[:, None]


def aff_op(mixer, x: Tensor, hw_shape: tuple[int, int], matmul: bool = False) -> Tensor:
    """``x + irfft2(m * Z)`` with ``m`` and the product on ``(re, im)``-stacked blocks."""
    band = SpectralBand.fraction(hw_shape, 1.0)
    if matmul:
        spectrum = rfft2_grid(x.reshape(x.shape[0], *hw_shape, x.shape[-1]), band)
    else:  # (B, C, H, cols, part) -> (B, part, H, cols, C)
        spectrum = Stacked(torch.view_as_real(rfft2(x, hw_shape)).permute(0, 4, 2, 3, 1), None)
    w1, b1, w2, b2 = (weight.to(x.dtype) for weight in mixer.weights())
    activation = torch.relu if mixer.act == 'relu' else torch.nn.functional.silu
    modes = to_blocks(spectrum, mixer.num_blocks)
    mask = _layer(activation(_layer(modes, w1, b1)), w2, b2)
    threshold = mixer.sparsity_threshold
    mask = mask - mask.clamp(-threshold, threshold)  # soft-shrink in two ONNX nodes
    mask_real, mask_imag = mask.chunk(2, dim=-1)
    real, imag = modes.chunk(2, dim=-1)
    product = torch.cat([mask_real * real - mask_imag * imag,
                         mask_real * imag + mask_imag * real], dim=-1)
    product = from_blocks(product, spectrum)
    if matmul:
        return x + irfft2_grid(product, hw_shape, band).flatten(1, 2)
    real, imag = product.data.permute(1, 0, 4, 2, 3).unbind(0)  # (B, C, H, cols) each
    return x + irfft2(torch.complex(real, imag), hw_shape)


def aff_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    return aff_op(mixer, x, hw_shape, matmul=True)
