"""AFNO in real arithmetic: the form :class:`~afno_seg.mixers.afno.AFNOMixer` takes in ONNX export.

ONNX has complex FFTs (the ``DFT`` operator, real tensors with a trailing ``[re, im]`` axis) but no
complex matrix product, so the block-diagonal complex MLP is written as real GEMMs on the stacked
real and imaginary parts: for ``a = W z + b`` with ``W = Wr + i Wi``, ``z = zr + i zi``::

    [ar]   [Wr  -Wi] [zr]   [br]
    [ai] = [Wi   Wr] [zi] + [bi]

one real ``(2 d_out, 2 d_in)`` matrix per block, 4 real multiply-adds per complex one as in the
complex GEMM. Split ReLU and split soft-shrink act element-wise on the stacked parts; the
magnitude shrink reads ``|a|`` from both halves. The mixer picks this path by itself while
``torch.onnx.is_in_onnx_export()``; training keeps the fused complex path
(:class:`~afno_seg.mixers.afno_fused.FusedAFNO`), which this one equals (tested in float64).
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from .spectral import SpectralBand

__all__ = ['afno_real_arithmetic', 'stacked_block_matrix']


def stacked_block_matrix(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """Released layout ``(2, k, d_in, d_out)`` -> real ``(k, 2 d_out, 2 d_in)``, the block form
    ``[[Wr, -Wi], [Wi, Wr]]`` of each block's channels-first complex matrix."""
    real, imag = weight[0].to(dtype).transpose(1, 2), weight[1].to(dtype).transpose(1, 2)
    return torch.cat([torch.cat([real, imag.neg()], dim=2), torch.cat([imag, real], dim=2)], dim=1)


def _stacked_bias(bias: Tensor, dtype: torch.dtype) -> Tensor:
    """Released layout ``(2, k, d)`` -> ``(k, 2 d, 1)``: real parts, then imaginary parts."""
    return bias.to(dtype).permute(1, 0, 2).reshape(bias.shape[1], -1, 1)


def _magnitude_shrink(stacked: Tensor, threshold: float) -> Tensor:
    """``max(|a| - lambda, 0) a / |a|`` of the complex ``a`` whose parts are the two halves of
    dim -2 (the clamp only guards 0/0 at ``a == 0``, where the factor is 0)."""
    real, imag = stacked.chunk(2, dim=-2)
    magnitude = torch.sqrt(real * real + imag * imag)
    gain = F.relu(magnitude - threshold) / magnitude.clamp_min(1e-30)
    return stacked * torch.cat([gain, gain], dim=-2)


def afno_real_arithmetic(x: Tensor, hw_shape: tuple[int, int], band: SpectralBand,
                         weights: tuple[Tensor, Tensor, Tensor, Tensor], threshold: float,
                         shrink: str = 'split') -> Tensor:
    """The AFNO mixer (FFT, block MLP, shrink, inverse FFT, ``+ x``) without complex matmuls.

    Args:
        x (Tensor): Tokens ``(B, H*W, C)``, float32 or float64.
        hw_shape (tuple[int, int]): The grid ``(H, W)``.
        band (SpectralBand): The kept modes of the ``rfft2`` spectrum.
        weights (tuple[Tensor, Tensor, Tensor, Tensor]): ``w1, b1, w2, b2`` in the released
            layout (``(2, k, d, f d)``, ``(2, k, f d)``, ``(2, k, f d, d)``, ``(2, k, d)``).
        threshold (float): Soft-shrink threshold lambda.
        shrink (str): ``'split'`` or ``'magnitude'``. Default: 'split'.

    Returns:
        Tensor: ``(B, H*W, C)`` in the dtype of ``x``.
    """
    w1, b1, w2, b2 = weights
    batch, _, channels = x.shape
    blocks, dtype = w1.shape[1], x.dtype
    grid = x.transpose(1, 2).reshape(batch, channels, *hw_shape)
    spectrum = torch.view_as_real(torch.fft.rfft2(grid, norm='ortho'))  # (B, C, H, W//2+1, 2)
    real, imag = band.gather(spectrum[..., 0]), band.gather(spectrum[..., 1])
    rows, cols = real.shape[-2:]
    stacked = torch.cat([real.reshape(batch, blocks, -1, rows * cols),
                         imag.reshape(batch, blocks, -1, rows * cols)], dim=2)  # (B, k, 2d, M)
    hidden = F.relu(stacked_block_matrix(w1, dtype) @ stacked + _stacked_bias(b1, dtype))
    out = stacked_block_matrix(w2, dtype) @ hidden + _stacked_bias(b2, dtype)
    out = F.softshrink(out, threshold) if shrink == 'split' else _magnitude_shrink(out, threshold)
    out_real, out_imag = out.chunk(2, dim=2)
    modes = torch.complex(band.scatter(out_real.reshape(batch, channels, rows, cols)),
                          band.scatter(out_imag.reshape(batch, channels, rows, cols)))
    mixed = torch.fft.irfft2(modes, s=tuple(hw_shape), norm='ortho')  # (B, C, H, W)
    return mixed.reshape(batch, channels, -1).transpose(1, 2) + x
