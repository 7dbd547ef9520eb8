"""The transforms every spectral mixer (AFNO, GFN, FNet, FNO) is written in, plain torch.

Conventions (``docs/flops.md`` for their cost): transforms are orthonormal (``norm='ortho'``) over
the token grid; tokens ``(B, H*W, C)`` are in row-major order of the ``H x W`` grid; spectra are
channels first, ``(B, C, H, W//2+1)``; a :class:`SpectralBand` names the kept low frequencies.
Spectral work runs in float32 with autocast off (:func:`run_in_fp32`): CPU FFTs have no half
kernels and cuFFT's need power-of-two sizes.

:func:`rfft2` and :func:`irfft2` (with a band: only its rows and columns) and :func:`fft3` are the
transforms the mixers' formulas call; ``fast=True`` (the ``fast`` form, :mod:`.forms`) swaps in
:mod:`.fast.transforms`' adjoint-gradient ops (same values, cheaper backward; called through
``torch.ops``, which :mod:`.fast` fills, so this module does not import it). The DFT as
matmuls is :mod:`.export.dft`. :func:`fft_flops` is THE FFT FLOP formula (``docs/flops.md``);
the traced counter (:mod:`afno_seg.analysis.flops`) imports it.

References:
    Guibas et al., arXiv:2111.13587 (AFNO). Li et al., arXiv:2010.08895 (FNO).
"""
import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ['SpectralBand', 'fft3', 'fft_flops', 'grid_to_tokens', 'irfft2', 'kept_count', 'rfft2',
           'rfft2_flops', 'run_in_fp32', 'signed_frequencies', 'tokens_to_grid']


def run_in_fp32(fn: Callable[..., Tensor], x: Tensor, *args, **kwargs) -> Tensor:
    """``fn(x_fp32, *args, **kwargs)`` with autocast off (where the device has it), cast back to
    ``x.dtype``; float64 stays float64. ``fn`` casts its parameters to ``x_fp32.dtype`` (it
    matters after ``module.half()``)."""
    device = x.device.type
    with torch.autocast(device, enabled=False) if torch.amp.is_autocast_available(device) \
            else nullcontext():
        out = fn(x.to(torch.float64 if x.dtype == torch.float64 else torch.float32), *args,
                 **kwargs)
    return out.to(x.dtype)


def tokens_to_grid(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``(B, H*W, C)`` tokens -> channels-last grid ``(B, H, W, C)`` (a view when possible)."""
    return x.reshape(x.shape[0], hw_shape[0], hw_shape[1], x.shape[-1])


def grid_to_tokens(x: Tensor) -> Tensor:
    """Channels-last grid ``(B, H, W, C)`` -> ``(B, H*W, C)`` tokens."""
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[-1])


def rfft2(x: Tensor, hw_shape: tuple[int, int], band: 'SpectralBand | None' = None,
          fast: bool = False) -> Tensor:
    """``Z = rfft2(X)`` of tokens ``(B, H*W, C)`` -> ``(B, C, H, W//2+1)``, or the band's kept
    modes ``(B, C, rows, cols)``."""
    spectrum = torch.ops.afno_seg.tokens_to_spectrum(x, hw_shape) if fast else \
        torch.fft.rfft2(tokens_to_grid(x, hw_shape).permute(0, 3, 1, 2), norm='ortho')
    return spectrum if band is None else band.gather(spectrum)


def irfft2(modes: Tensor, hw_shape: tuple[int, int], band: 'SpectralBand | None' = None,
           fast: bool = False) -> Tensor:
    """``X = irfft2(Z)`` of ``(B, C, H, W//2+1)`` (or a band's modes, zero elsewhere) -> tokens
    ``(B, H*W, C)``."""
    spectrum = modes if band is None else band.scatter(modes)
    if fast:
        return torch.ops.afno_seg.spectrum_to_grid(spectrum, hw_shape).flatten(1, 2)
    return torch.fft.irfft2(spectrum, s=tuple(hw_shape), norm='ortho').flatten(2).mT


def fft3(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """The complex DFT of tokens ``(B, H*W, C)`` over ``(H, W, C)`` -> ``(B, H*W, C)``."""
    return grid_to_tokens(torch.fft.fftn(tokens_to_grid(x, hw_shape), dim=(1, 2, 3),
                                         norm='ortho'))


def signed_frequencies(n: int) -> Tensor:
    """Signed frequency of each FFT index: ``k = i`` for ``i <= n/2``, ``k = i - n`` otherwise."""
    index = torch.arange(n)
    return torch.where(index <= n // 2, index, index - n)


def kept_count(fraction: float, num_frequencies: int) -> int:
    """``ceil(fraction * num_frequencies)``, at least 1; rounding first so 0.1 * 30 gives 3."""
    return max(1, math.ceil(round(fraction * num_frequencies, 9)))


@dataclass(frozen=True)
class SpectralBand:
    """The low-frequency modes kept from an ``rfft2`` spectrum of an ``H x W`` grid
    (``height x width``, ``W // 2 + 1`` columns): rows ``[0, n_low)`` (signed frequencies
    ``0 .. n_low-1``) and ``[H - n_high, H)`` (``-n_high .. -1``), columns ``[0, n_cols)``."""
    height: int
    width: int
    n_low: int
    n_high: int
    n_cols: int

    @classmethod
    def lowpass(cls, hw_shape: tuple[int, int], row_freqs: int, col_freqs: int) -> 'SpectralBand':
        """Keep rows with ``|k| < row_freqs`` and columns ``j < col_freqs``, clipped to the grid."""
        height, width = hw_shape
        return cls(height, width,
                   n_low=min(row_freqs, height // 2 + 1),
                   n_high=min(row_freqs - 1, (height - 1) // 2),
                   n_cols=min(col_freqs, width // 2 + 1))

    @classmethod
    def fraction(cls, hw_shape: tuple[int, int], fraction: float) -> 'SpectralBand':
        """Keep the lowest ``fraction`` of the frequencies along both axes.

        Columns: the first ``ceil(fraction * (W//2+1))``. Rows: ``|k| < ceil(fraction * (H//2+1))``,
        the same rule on the full axis's non-negative frequencies, so ``fraction = 1`` keeps all.
        """
        height, width = hw_shape
        return cls.lowpass(hw_shape, kept_count(fraction, height // 2 + 1),
                           kept_count(fraction, width // 2 + 1))

    @property
    def n_rows(self) -> int:
        return self.n_low + self.n_high

    @property
    def num_modes(self) -> int:
        """Number of kept complex modes per channel."""
        return self.n_rows * self.n_cols

    @property
    def is_full(self) -> bool:
        return self.n_rows == self.height and self.n_cols == self.width // 2 + 1

    def gather(self, spectrum: Tensor) -> Tensor:
        """``(..., H, W//2+1)`` -> kept modes ``(..., n_rows, n_cols)``, low rows first."""
        if self.is_full:
            return spectrum
        low = spectrum[..., :self.n_low, :self.n_cols]
        if self.n_high == 0:
            return low.contiguous()
        return torch.cat([low, spectrum[..., self.height - self.n_high:, :self.n_cols]], dim=-2)

    def scatter(self, modes: Tensor) -> Tensor:
        """Kept modes ``(..., n_rows, n_cols)`` -> spectrum ``(..., H, W//2+1)``, 0 elsewhere."""
        if self.is_full:
            return modes
        spectrum = modes.new_zeros(*modes.shape[:-2], self.height, self.width // 2 + 1)
        spectrum[..., :self.n_low, :self.n_cols] = modes[..., :self.n_low, :]
        if self.n_high:
            spectrum[..., self.height - self.n_high:, :self.n_cols] = modes[..., self.n_low:, :]
        return spectrum


def fft_flops(num_points: int, real: bool = False) -> float:
    """FLOPs of one FFT of ``num_points``: ``5 N log2 N`` complex, ``2.5 N log2 N`` real in/out."""
    return 0.0 if num_points <= 1 else (2.5 if real else 5.0) * num_points * math.log2(num_points)


def rfft2_flops(hw_shape: tuple[int, int], channels: int) -> float:
    """FLOPs of an ``rfft2`` (or ``irfft2``) over an ``H x W`` grid for each of ``channels``."""
    return channels * fft_flops(hw_shape[0] * hw_shape[1], real=True)
