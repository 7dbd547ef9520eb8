"""Shared helpers of the spectral token mixers (AFNO, GFN, FNet, FNO).

* **fp32 islands.** Spectral work runs in float32 with autocast disabled and the result is cast
  back to the input dtype (:func:`run_in_fp32`). CPU FFTs have no half/bfloat16 kernels at all, and
  cuFFT in half precision accepts only power-of-two sizes and loses accuracy on long transforms.
* **Token <-> grid <-> spectrum.** Tokens ``(B, N, C)`` in row-major order of an ``H x W`` grid
  are the channels-last grid ``(B, H, W, C)`` without a copy, but FFTs want the transformed axes
  innermost, so the spectrum is handled channels-first, ``(B, C, H, W//2+1)``, contiguous
  (:func:`tokens_to_spectrum`), and :func:`spectrum_to_grid` returns contiguous channels-last
  grids. Both layout changes are :func:`transposed_copy`: one 2-D transpose per image, which
  torch copies in cache-sized tiles. Left to itself, torch's FFT copies channels-last input
  with its general strided copy, several times slower on grids larger than the cache, the
  largest single cost of a spectral mixer there (``BENCHMARKS.md``).
* **Cheap gradients.** The two transforms are each other's adjoint up to a per-column weight:
  for ``Z = rfft2(X)`` the gradient is ``irfft2(w * dZ)`` and for ``Y = irfft2(Z)`` it is
  ``rfft2(dY) / w``, with ``w = 1`` on column 0 (and the Nyquist column when ``W`` is even) and
  ``1/2`` on the others (each stands for two conjugate modes) (:func:`hermitian_column_weight`).
  :func:`tokens_to_spectrum` and :func:`spectrum_to_grid` use exactly that as their backward.
  torch's own backward of ``rfft2`` zero-pads the spectrum to the full grid and runs a complex
  FFT of it (plus copies), several times the cost of the forward transform.
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
    'SpectralBand', 'channels_first_grid', 'fft_flops', 'fp32_island', 'grid_to_tokens',
    'hermitian_column_weight', 'irfft2_to_tokens', 'kept_count', 'rfft2_flops', 'rfft2_of_tokens',
    'run_in_fp32', 'signed_frequencies',
    'spectral_dtype', 'spectrum_to_grid', 'tokens_from_channels_first', 'tokens_to_grid',
    'tokens_to_spectrum', 'transposed_copy'
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


def hermitian_column_weight(width: int, num_columns: int | None = None, *, dtype=torch.float32,
                            device=None) -> Tensor:
    """Weight ``w`` of the half-spectrum columns of an ``rfft2`` over a grid ``width`` wide.

    ``w = 1`` on column 0 and, for even ``width``, on the Nyquist column ``width // 2``; ``1/2``
    elsewhere (those columns stand for a mode and its conjugate). The adjoint of ``Z = rfft2(X)``
    (orthonormal) is ``irfft2(w * Z)`` and that of ``irfft2`` is ``rfft2(.) / w``. Only the first
    ``num_columns`` (default ``width // 2 + 1``) are returned.
    """
    weight = torch.full((width // 2 + 1,), 0.5, dtype=dtype, device=device)
    weight[0] = 1.0
    if width % 2 == 0:
        weight[-1] = 1.0
    return weight[:num_columns]


def transposed_copy(x: Tensor) -> Tensor:
    """``(B, P, Q) -> (B, Q, P)``, contiguous, copied one 2-D matrix at a time.

    For a contiguous ``x`` each ``x[b].t()`` takes torch's tiled 2-D transpose copy; a single
    ``x.transpose(1, 2).contiguous()`` takes the general strided copy instead (see the module
    docstring for the difference). On other devices: one batched transpose copy.
    """
    if x.device.type != 'cpu':
        return x.transpose(1, 2).contiguous()
    out = x.new_empty(x.shape[0], x.shape[2], x.shape[1])
    for index in range(x.shape[0]):
        out[index].copy_(x[index].t())
    return out


def channels_first_grid(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` -> contiguous channels-first grid ``(B, C, H, W)`` (a copy)."""
    return transposed_copy(x).view(x.shape[0], x.shape[-1], *hw_shape)


def tokens_from_channels_first(grid: Tensor) -> Tensor:
    """Channels-first grid ``(B, C, H, W)`` -> contiguous tokens ``(B, H*W, C)`` (a copy)."""
    return transposed_copy(grid.reshape(grid.shape[0], grid.shape[1], -1))


def rfft2_of_tokens(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``rfft2`` of tokens ``(B, H*W, C)`` -> ``(B, C, H, W//2+1)``; plain torch
    autograd (for a Function's own forward/backward; :func:`tokens_to_spectrum` otherwise)."""
    return torch.fft.rfft2(channels_first_grid(x, hw_shape), norm='ortho')


def irfft2_to_tokens(spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``irfft2`` of ``(B, C, H, W//2+1)`` -> contiguous tokens ``(B, H*W, C)``;
    plain torch autograd (see :func:`rfft2_of_tokens`)."""
    return tokens_from_channels_first(torch.fft.irfft2(spectrum, s=tuple(hw_shape), norm='ortho'))


class _TokensToSpectrum(torch.autograd.Function):
    """``rfft2`` of tokens with the adjoint ``irfft2(w * dZ)`` as backward (differentiable)."""

    @staticmethod
    def forward(ctx, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        ctx.hw_shape = hw_shape
        return rfft2_of_tokens(x, hw_shape)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.real.dtype,
                                         device=grad.device)
        return grid_to_tokens(spectrum_to_grid(grad * weight, ctx.hw_shape)), None


class _SpectrumToGrid(torch.autograd.Function):
    """``irfft2`` to a channels-last grid with the adjoint ``rfft2(dY) / w`` as backward."""

    @staticmethod
    def forward(ctx, spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        ctx.hw_shape = hw_shape
        return tokens_to_grid(irfft2_to_tokens(spectrum, hw_shape), hw_shape)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.dtype, device=grad.device)
        return tokens_to_spectrum(grid_to_tokens(grad), ctx.hw_shape) / weight, None


def tokens_to_spectrum(x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``rfft2`` of tokens ``(B, H*W, C)`` over the grid -> ``(B, C, H, W//2+1)``.

    The result is contiguous. Its backward is the adjoint transform (see the module docstring),
    itself differentiable.
    """
    return _TokensToSpectrum.apply(x, tuple(hw_shape))


def spectrum_to_grid(spectrum: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """Orthonormal ``irfft2`` of ``(B, C, H, W//2+1)`` -> contiguous grid ``(B, H, W, C)``.

    Backward: the adjoint transform (see the module docstring), itself differentiable.
    """
    return _SpectrumToGrid.apply(spectrum, tuple(hw_shape))


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
