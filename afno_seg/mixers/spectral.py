"""Shared helpers of the spectral token mixers (AFNO, GFN, FNet, FNO).

* **fp32 islands.** Spectral work runs in float32 with autocast disabled and the result is cast
  back to the input dtype (:func:`run_in_fp32`). CPU FFTs have no half/bfloat16 kernels at all, and
  cuFFT in half precision accepts only power-of-two sizes and loses accuracy on long transforms.
* **Token <-> grid <-> spectrum.** Tokens ``(B, N, C)`` in row-major order of an ``H x W`` grid
  are the channels-last grid ``(B, H, W, C)`` without a copy. torch's FFTs copy their input so
  that the transformed axes are innermost and return that layout, so the spectrum is handled
  channels-first, ``(B, C, H, W//2+1)``, where it is contiguous (:func:`tokens_to_spectrum`);
  :func:`spectrum_to_grid` returns the inverse as a channels-last view of a channels-first
  result, so that a following residual add (``x + view``, laid out like ``x``) writes the tokens
  without another copy.
* **Low-frequency bands** (:class:`SpectralBand`) for the hard truncation of AFNO and the kept
  modes of FNO, both on the last two axes ``(H, W//2+1)`` of an ``rfft2`` spectrum. Column ``j``
  of the half axis has frequency ``j``; row ``i`` of the full axis has the signed frequency
  ``k = i`` for ``i <= H/2`` and ``k = i - H`` otherwise. A band that keeps ``m_h`` row and
  ``m_w`` column frequencies holds the rows with ``|k| < m_h`` (both signs, so the band is closed
  under the Hermitian symmetry of a real signal's spectrum) and the columns ``j < m_w``: two
  contiguous row ranges ``[0, n_low)`` and ``[H - n_high, H)``, so gathering and scattering are
  slices, not index ops.
* **FFT FLOP formulas**, so every mixer counts transforms the same way (see ``base.py``):
  ``5 N log2 N`` for a complex FFT of N points, ``2.5 N log2 N`` for a real-input or real-output
  one.

References:
    Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token Mixers for Transformers",
    ICLR 2022 (arXiv:2111.13587). Li et al., "Fourier Neural Operator for Parametric Partial
    Differential Equations", ICLR 2021 (arXiv:2010.08895).
"""
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    'SpectralBand', 'fft_flops', 'fp32_island', 'grid_to_tokens', 'kept_count', 'rfft2_flops',
    'run_in_fp32', 'signed_frequencies', 'spectral_dtype', 'spectrum_to_grid', 'tokens_to_grid',
    'tokens_to_spectrum'
]


@contextmanager
def fp32_island(device_type: str):
    """Context in which autocast is disabled on ``device_type`` (no-op where autocast is absent)."""
    if torch.amp.is_autocast_available(device_type):
        with torch.autocast(device_type=device_type, enabled=False):
            yield
    else:
        yield


def spectral_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype spectral work runs in: float64 stays float64, everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def run_in_fp32(fn: Callable[..., Tensor], x: Tensor, *args, **kwargs) -> Tensor:
    """Call ``fn(x_fp32, *args, **kwargs)`` with autocast off and cast its result to ``x.dtype``.

    ``fn`` must cast any parameter it uses to ``x_fp32.dtype`` (a no-op for float32 parameters;
    it matters after ``module.half()``).
    """
    with fp32_island(x.device.type):
        out = fn(x.to(spectral_dtype(x.dtype)), *args, **kwargs)
    return out.to(x.dtype)


def tokens_to_grid(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``(B, H*W, C)`` tokens -> channels-last grid ``(B, H, W, C)`` (a view when possible)."""
    return x.reshape(x.shape[0], hw_shape[0], hw_shape[1], x.shape[-1])


def grid_to_tokens(x: Tensor) -> Tensor:
    """Channels-last grid ``(B, H, W, C)`` -> ``(B, H*W, C)`` tokens."""
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[-1])


def tokens_to_spectrum(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``rfft2`` of tokens ``(B, H*W, C)`` over the grid -> ``(B, C, H, W//2+1)``."""
    return torch.fft.rfft2(tokens_to_grid(x, hw_shape), dim=(1, 2), norm='ortho').permute(
        0, 3, 1, 2)


def spectrum_to_grid(spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``irfft2`` of ``(B, C, H, W//2+1)`` -> grid ``(B, H, W, C)``, a permuted view."""
    grid = torch.fft.irfft2(spectrum, s=tuple(hw_shape), dim=(-2, -1), norm='ortho')
    return grid.permute(0, 2, 3, 1)


def signed_frequencies(n: int) -> Tensor:
    """Signed frequency of each FFT index: ``k = i`` for ``i <= n/2``, ``k = i - n`` otherwise."""
    index = torch.arange(n)
    return torch.where(index <= n // 2, index, index - n)


def kept_count(fraction: float, num_frequencies: int) -> int:
    """``ceil(fraction * num_frequencies)``, at least 1; rounding first so 0.1 * 30 gives 3."""
    return max(1, math.ceil(round(fraction * num_frequencies, 9)))


@dataclass(frozen=True)
class SpectralBand:
    """The low-frequency modes kept from an ``rfft2`` spectrum of an ``H x W`` grid.

    Attributes:
        height (int): H of the grid.
        width (int): W of the grid (the spectrum has ``W // 2 + 1`` columns).
        n_low (int): rows ``[0, n_low)`` are kept (signed frequencies ``0 .. n_low-1``).
        n_high (int): rows ``[H - n_high, H)`` are kept (signed frequencies ``-n_high .. -1``).
        n_cols (int): columns ``[0, n_cols)`` are kept.
    """
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
    if num_points <= 1:
        return 0.0
    return (2.5 if real else 5.0) * num_points * math.log2(num_points)


def rfft2_flops(hw_shape: tuple[int, int], channels: int) -> float:
    """FLOPs of an ``rfft2`` (or ``irfft2``) over an ``H x W`` grid for each of ``channels``."""
    return channels * fft_flops(hw_shape[0] * hw_shape[1], real=True)
