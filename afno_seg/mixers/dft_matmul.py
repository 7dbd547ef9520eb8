"""The 2-D real DFT of the spectral mixers as real matrix products (runtimes without a fast FFT).

What it computes, for a real ``x`` of shape ``(..., H, W)`` and a :class:`~.spectral.SpectralBand`
``band`` of that grid (default: all modes)::

    rfft2(x, band)        == band.gather(torch.fft.rfft2(x, norm='ortho'))     as (real, imag)
    irfft2(re, im, band)  == torch.fft.irfft2(band.scatter(re + i im), s=(H, W), norm='ortho')

with the real and imaginary parts carried as two real tensors (ONNX has no complex type, and
every runtime has ``MatMul``). Each axis is one matrix product with constant matrices built in
float64 for the sizes at hand and cached per ``(size, kept indices, dtype, device)``:

* **W, real -> complex** (forward): ``x @ [C | -S]`` with ``C[m, j] = cos(2 pi m j / W) / sqrt(W)``
  over the kept columns ``j < n_cols`` only (of the ``W // 2 + 1``): ``2 n_cols`` real
  multiply-adds per input point.
* **H, complex -> complex** (forward): ``E @ Y``, ``E[r, h] = exp(-2 pi i k_r h / H) / sqrt(H)``
  over the kept rows' signed frequencies ``k_r`` (``|k| < m_h``, both signs): ``4 n_rows`` real
  multiply-adds per point of the ``H x n_cols`` intermediate.
* **Inverses**: ``E^H`` along H (kept rows -> all H rows), then along W the Hermitian sum
  ``x[m] = sum_j c_j (Re Z_j cos(2 pi j m / W) - Im Z_j sin(..)) / sqrt(W)`` with ``c_j = 1`` on
  column 0 and on the Nyquist column of an even W, 2 elsewhere (each stands for a mode and its
  conjugate); the imaginary parts of those two columns drop out as in ``torch.fft.irfft``.

Cost of one direct transform (either direction), per channel: ``2 n_cols H (W + 2 n_rows)`` real
multiply-adds, against ``~2.5 HW log2(HW)`` FLOPs of an FFT. It falls with the band: AFNO-25% at
64 x 64 keeps 9 of 33 columns and 17 of 64 rows, so it costs 6% of the full band's.

**Factored form** (Cooley-Tukey written as matrix products, the Monarch idea of FlashFFTConv):
for ``n = n1 n2``, input index ``m = n2 m1 + m2`` and output index ``k = k1 + n1 k2``::

    A[k1, m2]     = sum_m1 x[n2 m1 + m2] exp(-2 pi i m1 k1 / n1)
    X[k1 + n1 k2] = sum_m2 A[k1, m2] exp(-2 pi i m2 k1 / n) exp(-2 pi i m2 k2 / n2)

a length-``n1`` DFT (a matmul), a twiddle (element-wise), a length-``n2`` DFT (a matmul) and one
reorder (a transpose copy): ``n1 + n2`` complex multiply-adds a point instead of ``n`` (256 =
16 x 16: 32 instead of 256). Along W the second DFT keeps only ``ceil(n_cols / n1)`` outputs
(half the work of a complex one), along H the kept rows are picked after the reorder. The rule
(:func:`use_factored`): factor H when the direct form costs at least ``FACTORED_GAIN`` times
the factored one; W stays direct (``BENCHMARKS.md`` has the measurement).

Gradients: plain autograd through the matmuls (the matrices are constants).

These channels-first forms serve :mod:`.spectral`'s ``rfft2``/``irfft2``/``fft3`` in
``dft_mode('matmul')`` (FNO's export). AFNO, GFN and FNet export through :mod:`.dft_tokens`
instead: the same transforms on the tokens' channels-last layout, with complex values stacked
into single real products and both axes factored where that is faster (``BENCHMARKS.md``).
"""
import math
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

if TYPE_CHECKING:  # spectral.py imports this module (its dft_mode switch)
    from .spectral import SpectralBand

__all__ = ['DFT_MODES', 'FACTORED_GAIN', 'FACTORED_MIN', 'Pair', 'current_dft_mode', 'dft_mode',
           'direct_cost', 'factored_cost', 'fft3', 'hermitian_weight', 'irfft2', 'phase', 'rfft2',
           'split_factor', 'transform_cost', 'use_factored']

DFT_MODES = ('op', 'matmul')
_mode = ['op']


@contextmanager
def dft_mode(mode: str):
    """Within this context the spectral mixers' transforms (``spectral.rfft2``, ``irfft2``,
    ``fft3``) run as ``'matmul'`` (this module) or ``'op'`` (``torch.fft``, the default).

    Used by the ONNX export (``tools/deployment/pytorch2onnx.py --dft``); the values are the same
    either way (tested), only the graph differs.
    """
    if mode not in DFT_MODES:
        raise ValueError(f'dft mode must be one of {DFT_MODES}, got {mode!r}')
    previous, _mode[0] = _mode[0], mode
    try:
        yield
    finally:
        _mode[0] = previous


def current_dft_mode() -> str:
    """``'op'`` or ``'matmul'``: the innermost :func:`dft_mode` in effect."""
    return _mode[0]

Pair = tuple[Tensor, Tensor]
# An axis is factored when its direct form costs at least this many times the factored one
# (multiply-adds a point; the factored form also pays a twiddle and a reorder copy).
FACTORED_GAIN = 4.0
FACTORED_MIN = 4  # both factors at least this (a factor of 2 or 3 leaves matmuls too thin)


def split_factor(n: int) -> tuple[int, int] | None:
    """``(n1, n2)`` with ``n1 * n2 == n``, ``n1 <= n2``, ``n1`` the largest divisor of ``n`` up to
    ``sqrt(n)``; None when ``n1 < FACTORED_MIN`` (prime or nearly)."""
    for n1 in range(math.isqrt(n), FACTORED_MIN - 1, -1):
        if n % n1 == 0:
            return n1, n // n1
    return None


def direct_cost(n: int, kept: int) -> float:
    """Complex multiply-adds a point of the direct transform of ``n`` points keeping ``kept``."""
    return float(kept)


def factored_cost(n: int, kept: int) -> float:
    """The same for the factored form (``inf`` when ``n`` does not factor): the two small DFTs
    plus 2 for the twiddle and the reorder (the second DFT shrinks with ``kept`` along W only,
    which this ignores: the rule errs towards the direct form)."""
    factors = split_factor(n)
    return math.inf if factors is None else float(sum(factors) + 2)


def use_factored(n: int, kept: int, axis: str = 'h') -> bool:
    """Whether an axis of ``n`` points keeping ``kept`` outputs takes the factored form.

    Only H (``axis='h'``): along W the first small DFT contracts an axis inside the last one, a
    batch of tiny matmuls (one per row of every channel), which measured slower than the direct
    form at every B3 stage point (``BENCHMARKS.md``); ``factored=True`` still forces it. (The
    channels-last layout of :mod:`.dft_tokens` has no such batch; it has its own rule.)
    """
    return axis == 'h' and direct_cost(n, kept) >= FACTORED_GAIN * factored_cost(n, kept)


# ---------------------------------------------------------------------------------------------
# Constant matrices (float64 angles from exact integer products mod n, cast once per key)


def phase(out_index: Tensor, in_index: Tensor, n: int, sign: float) -> Pair:
    """``exp(sign 2 pi i outer(out, in) / n)`` as (cos, sin) in float64 (exact mod n first)."""
    angle = sign * 2 * math.pi * torch.outer(out_index, in_index).remainder(n).double() / n
    return torch.cos(angle), torch.sin(angle)


def hermitian_weight(freqs: Tensor, n: int, cols: int) -> Tensor:
    """``c_k`` of an inverse real transform: 2, 1 at frequency 0 and at n/2, 0 from ``cols`` on."""
    weight = torch.where(freqs < cols, 2.0, 0.0).double()
    weight[freqs == 0] = 1.0
    if n % 2 == 0:
        weight[freqs == n // 2] = 1.0
    return weight


@lru_cache(maxsize=256)
def _matrices(kind: str, n: int, a: int, b: int, dtype: torch.dtype,
              device: torch.device) -> tuple[Tensor, ...]:
    """The constant matrices of one transform kind, built in float64 then cast (cached).

    ``a, b``: the kept counts (``n_low, n_high`` of H's rows; ``n_cols, 0`` along W) or, for the
    factored kinds, ``(n1, n2)``. Built with torch's dispatch modes off, so that a call during
    an export (fake tensors, graph recording) makes real tensors: the export stores them as
    constants, and the cache never holds a fake tensor of a finished trace.
    """
    with _disable_current_modes():
        return _build_matrices(kind, n, a, b, dtype, device)


def _build_matrices(kind: str, n: int, a: int, b: int, dtype: torch.dtype,
                    device: torch.device) -> tuple[Tensor, ...]:
    scale = 1 / math.sqrt(n)
    if kind in ('h', 'h_inv'):  # kept signed row frequencies against all n rows
        freqs = torch.cat([torch.arange(a), torch.arange(n - b, n)])
        cos, sin = phase(freqs, torch.arange(n), n, -1.0)
        mats = (cos * scale, sin * scale)  # (R, n): exp(-i..)
        if kind == 'h_inv':  # (n, R): exp(+i..) = conj transpose
            mats = (mats[0].T.contiguous(), -mats[1].T.contiguous())
    elif kind == 'w':  # (n, 2 cols): [C | -S]
        cos, sin = phase(torch.arange(n), torch.arange(a), n, -1.0)
        mats = (torch.cat([cos, sin], dim=1) * scale, )
    elif kind == 'w_inv':  # (2 cols, n): [c C; -c S] with the Hermitian column weights c
        cos, sin = phase(torch.arange(a), torch.arange(n), n, 1.0)
        weight = hermitian_weight(torch.arange(a), n, a)[:, None]
        mats = (torch.cat([weight * cos, -weight * sin]) * scale, )
    else:  # factored: first DFT (n1 x n1), twiddle (n1, n2), second DFT (n2 x n2), 'sign'
        sign = -1.0 if kind == 'f' else 1.0
        first = phase(torch.arange(a), torch.arange(a), a, sign)
        twiddle = phase(torch.arange(a), torch.arange(b), n, sign)
        second = phase(torch.arange(b), torch.arange(b), b, sign)
        mats = (first[0] * scale, first[1] * scale, *twiddle, *second)
    return tuple(m.to(device=device, dtype=dtype).contiguous() for m in mats)


def _get(kind: str, n: int, a: int, b: int, like: Tensor) -> tuple[Tensor, ...]:
    return _matrices(kind, n, a, b, like.dtype, like.device)


# ---------------------------------------------------------------------------------------------
# Complex arithmetic on (real, imag) pairs


def _left(matrix: Pair, x: Pair) -> Pair:
    """``M @ x`` for complex ``M`` and ``x`` (4 real matmuls)."""
    (mr, mi), (xr, xi) = matrix, x
    return mr @ xr - mi @ xi, mr @ xi + mi @ xr


def _right(x: Pair, matrix: Pair) -> Pair:
    """``x @ M`` for complex ``x`` and ``M``."""
    (xr, xi), (mr, mi) = x, matrix
    return xr @ mr - xi @ mi, xr @ mi + xi @ mr


def _times(x: Pair, factor: Pair) -> Pair:
    """Element-wise complex product."""
    (xr, xi), (fr, fi) = x, factor
    return xr * fr - xi * fi, xr * fi + xi * fr


def _pair_map(fn, x: Pair) -> Pair:
    return fn(x[0]), fn(x[1])


def _select_rows(x: Tensor, n: int, n_low: int, n_high: int) -> Tensor:
    """Rows ``[0, n_low)`` and ``[n - n_high, n)`` of axis -2 (all when they cover it)."""
    if n_low + n_high == n:
        return x
    if n_high == 0:
        return x[..., :n_low, :]
    return torch.cat([x[..., :n_low, :], x[..., n - n_high:, :]], dim=-2)


def _scatter_rows(x: Tensor, n: int, n_low: int, n_high: int) -> Tensor:
    """Inverse of :func:`_select_rows`: zeros in the rows that were not kept."""
    if n_low + n_high == n:
        return x
    zeros = x.new_zeros(*x.shape[:-2], n - n_low - n_high, x.shape[-1])
    return torch.cat([x[..., :n_low, :], zeros, x[..., n_low:, :]], dim=-2)


# ---------------------------------------------------------------------------------------------
# Along W (last axis): real -> complex keeping n_cols columns, and its Hermitian inverse


def _rdft_w(x: Tensor, cols: int, factored: bool) -> Pair:
    n = x.shape[-1]
    if not factored:
        out = x @ _get('w', n, cols, 0, x)[0]
        return out[..., :cols], out[..., cols:]
    n1, n2 = split_factor(n)
    f1r, f1i, tr, ti, f2r, f2i = _get('f', n, n1, n2, x)
    k2 = -(-cols // n1)  # outputs k = k1 + n1 k2 < cols need k2 < ceil(cols / n1)
    grid = x.unflatten(-1, (n1, n2))  # (..., m1, m2)
    a = (f1r @ grid, f1i @ grid)  # (..., k1, m2)
    b = _right(_times(a, (tr, ti)), (f2r[:, :k2], f2i[:, :k2]))  # (..., k1, k2); F2 symmetric
    return _pair_map(lambda t: t.transpose(-1, -2).flatten(-2)[..., :cols], b)


def _irdft_w(z: Pair, n: int, factored: bool) -> Tensor:
    cols = z[0].shape[-1]
    if not factored:
        return torch.cat(z, dim=-1) @ _get('w_inv', n, cols, 0, z[0])[0]
    n1, n2 = split_factor(n)
    g1r, g1i, tr, ti, g2r, g2i = _get('fi', n, n1, n2, z[0])
    weight = torch.full((cols, ), 2.0, dtype=z[0].dtype, device=z[0].device)
    weight[0] = 1.0
    if n % 2 == 0 and cols == n // 2 + 1:
        weight[-1] = 1.0
    j2 = -(-cols // n1)
    pad = j2 * n1 - cols
    z = _pair_map(lambda t: torch.nn.functional.pad(t * weight, (0, pad)).unflatten(
        -1, (j2, n1)).transpose(-1, -2), z)  # (..., j1, j2)
    b = _times(_right(z, (g2r[:j2], g2i[:j2])), (tr, ti))  # (..., j1, m2)
    return (g1r @ b[0] - g1i @ b[1]).flatten(-2)  # real part of G1 @ b: (..., m1 * n2 + m2)


# ---------------------------------------------------------------------------------------------
# Along H (axis -2): complex -> kept rows, and kept rows -> complex


def _dft_h(y: Pair, n_low: int, n_high: int, factored: bool) -> Pair:
    n = y[0].shape[-2]
    if not factored:
        return _left(_get('h', n, n_low, n_high, y[0]), y)
    n1, n2 = split_factor(n)
    f1r, f1i, tr, ti, f2r, f2i = _get('f', n, n1, n2, y[0])
    cols = y[0].shape[-1]
    a = _left((f1r, f1i), _pair_map(lambda t: t.unflatten(-2, (n1, n2)).flatten(-2), y))
    a = _times(_pair_map(lambda t: t.unflatten(-1, (n2, cols)), a),
               (tr.unsqueeze(-1), ti.unsqueeze(-1)))  # (..., k1, m2, cols)
    b = _left((f2r, f2i), a)  # (..., k1, k2, cols)
    return _pair_map(lambda t: _select_rows(t.transpose(-3, -2).flatten(-3, -2), n, n_low,
                                            n_high), b)


def _idft_h(z: Pair, n: int, n_low: int, n_high: int, factored: bool) -> Pair:
    if not factored:
        return _left(_get('h_inv', n, n_low, n_high, z[0]), z)
    n1, n2 = split_factor(n)
    g1r, g1i, tr, ti, g2r, g2i = _get('fi', n, n1, n2, z[0])
    cols = z[0].shape[-1]
    # (..., j, cols) with j = j1 + n1 j2 -> (..., j1, j2, cols)
    z = _pair_map(lambda t: _scatter_rows(t, n, n_low, n_high).unflatten(-2, (n2, n1)).transpose(
        -3, -2), z)
    b = _times(_left((g2r, g2i), z), (tr.unsqueeze(-1), ti.unsqueeze(-1)))  # (..., j1, m2, cols)
    out = _left((g1r, g1i), _pair_map(lambda t: t.flatten(-2), b))  # (..., m1, m2 * cols)
    return _pair_map(lambda t: t.unflatten(-1, (n2, cols)).flatten(-3, -2), out)


# ---------------------------------------------------------------------------------------------
# The 2-D transforms


def _band(band: 'SpectralBand | None', hw_shape: tuple[int, int]) -> 'SpectralBand':
    from .spectral import SpectralBand
    if band is None:
        return SpectralBand.fraction(hw_shape, 1.0)
    if (band.height, band.width) != tuple(hw_shape):
        raise ValueError(f'band of a {band.height}x{band.width} grid used on {hw_shape}')
    return band


def rfft2(x: Tensor, band: 'SpectralBand | None' = None,
          factored: bool | None = None) -> Pair:
    """``band.gather(torch.fft.rfft2(x, norm='ortho'))`` by matmuls, as ``(real, imag)``.

    Args:
        x (Tensor): Real ``(..., H, W)``, float32 or float64.
        band (SpectralBand, optional): The kept modes (default: all ``H x (W // 2 + 1)``).
        factored (bool, optional): Force the factored (True) or direct (False) form on both axes
            (an axis that does not factor stays direct); None: per axis by
            :func:`use_factored`. Default: None.

    Returns:
        tuple[Tensor, Tensor]: Real and imaginary parts, ``(..., n_rows, n_cols)`` each, rows in
        the band's gather order (low rows, then the negative frequencies).
    """
    height, width = x.shape[-2:]
    band = _band(band, (height, width))
    y = _rdft_w(x, band.n_cols, _factor(width, band.n_cols, factored, 'w'))
    return _dft_h(y, band.n_low, band.n_high, _factor(height, band.n_rows, factored, 'h'))


def irfft2(real: Tensor, imag: Tensor, hw_shape: tuple[int, int],
           band: 'SpectralBand | None' = None, factored: bool | None = None) -> Tensor:
    """``torch.fft.irfft2(band.scatter(real + i imag), s=hw_shape, norm='ortho')`` by matmuls.

    Args:
        real (Tensor): ``(..., n_rows, n_cols)``, the band's kept modes in gather order.
        imag (Tensor): Same shape.
        hw_shape (tuple[int, int]): The output grid ``(H, W)``.
        band (SpectralBand, optional): The kept modes (default: all). Default: None.
        factored (bool, optional): As in :func:`rfft2`. Default: None.

    Returns:
        Tensor: Real ``(..., H, W)``.
    """
    height, width = hw_shape
    band = _band(band, hw_shape)
    if real.shape[-2:] != (band.n_rows, band.n_cols):
        raise ValueError(f'modes of shape {tuple(real.shape[-2:])} for a band of '
                         f'{band.n_rows}x{band.n_cols}')
    z = _idft_h((real, imag), height, band.n_low, band.n_high,
                _factor(height, band.n_rows, factored, 'h'))
    return _irdft_w(z, width, _factor(width, band.n_cols, factored, 'w'))


def fft3(x: Tensor) -> Pair:
    """``torch.fft.fftn(x, dim=(-3, -2, -1), norm='ortho')`` of a real ``x`` by matmuls, as
    ``(real, imag)`` (FNet's transform over ``(H, W, C)`` of a channels-last grid).

    Three direct products, the last axis first (real in, ``2 n`` multiply-adds a point), then
    the middle one and the first (complex, ``4 n`` each).
    """
    *_, height, width, channels = x.shape
    full = lambda n: _get('h', n, n // 2 + 1, (n - 1) // 2, x)  # noqa: E731  all n, in order
    real, imag = full(channels)  # symmetric: E^T = E
    y = _left(full(width), (x @ real, x @ imag))
    y = _left(full(height), _pair_map(lambda t: t.flatten(-2), y))
    return _pair_map(lambda t: t.unflatten(-1, (width, channels)), y)


def _factor(n: int, kept: int, factored: bool | None, axis: str) -> bool:
    if split_factor(n) is None:
        return False
    return use_factored(n, kept, axis) if factored is None else factored


def transform_cost(hw_shape: tuple[int, int], band: 'SpectralBand | None' = None,
                   factored: bool | None = None) -> float:
    """Real multiply-adds a channel of one :func:`rfft2` (or :func:`irfft2`) takes."""
    height, width = hw_shape
    band = _band(band, hw_shape)
    if _factor(width, band.n_cols, factored, 'w'):
        n1, n2 = split_factor(width)
        w_cost = height * width * 2 * n1 + height * n1 * n2 * 4 * -(-band.n_cols // n1)
    else:
        w_cost = height * width * 2 * band.n_cols
    if _factor(height, band.n_rows, factored, 'h'):
        h_cost = 4 * height * band.n_cols * sum(split_factor(height))
    else:
        h_cost = 4 * band.n_rows * height * band.n_cols
    return float(w_cost + h_cost)
