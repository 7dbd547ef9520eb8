"""The 2-D real DFT of channels-last tokens as real matmuls: the ``matmul`` form's transforms.

One implementation for AFNO, GFN and FNO (FNet's 3-D transform: :mod:`.fnet`), for runtimes
without a fast FFT. It keeps the tokens' layout ``(B, H, W, C)``, carries no complex tensor
(ONNX has none; every runtime has ``MatMul``) and writes each transform as a few large GEMMs:

* complex values are **stacked**: one real tensor with an axis of 2 (real, imaginary) right
  above the axis the next product contracts, so a complex product is ONE real matmul with
  ``[[Mr, -Mi], [Mi, Mr]]`` over ``(part, index)``; a real input needs only ``[C; -S]``, a real
  output only ``[C, S]``;
* a product contracts the outermost axis (H of ``(B, H, W*C)``: one GEMM per image) or a middle
  one (W of ``(B, H, W, C)``), never the channels; the output's part axis goes where the next
  product wants it by the constant's row order or by broadcasting.

So :func:`rfft2_grid` is two products (W real -> complex, H complex -> complex), no transpose,
:func:`irfft2_grid` the same backwards. Cost per channel and grid point, direct: ``2 cols``
multiply-adds along W, ``4 rows cols / W`` along H; a truncated band costs what it keeps.

**Factored axes** (full bands of the sizes in ``FACTORED_FROM``; Cooley-Tukey as two products,
:func:`split_factor` ``n = n1 n2``, ``m = n2 m1 + m2``, ``k = k1 + n1 k2``)::

    A[k1, m2] = sum_m1 x[n2 m1 + m2] exp(-2 pi i m1 k1 / n1)                 one product
    X[k1, k2] = sum_m2 A[k1, m2] exp(-2 pi i m2 (k1 + n1 k2) / n)            one per k1

the twiddle folded into the second product: ``4 (n1 + n2)`` multiply-adds a point instead of
``4 n`` (H), ``2 n1 + 4 ceil(cols / n1)`` instead of ``2 cols`` (W). The modes come in the order
``(k1, k2)`` (:class:`Stacked` records it), which the per-mode work takes as it is (GFN's filter
is reordered to match); the inverse returns the natural order.

Values equal ``torch.fft`` (``norm='ortho'``) within float rounding (``tests/test_dft_matmul.py``,
float64); constants are built in float64 from exact integer products mod n, then cast.
"""
import math
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ['FACTORED_FROM', 'Stacked', 'axis_factor', 'filter_modes', 'from_blocks',
           'multiply_planes',
           'hermitian_weight', 'irfft2_grid', 'phase', 'rfft2_grid', 'split_factor', 'to_blocks',
           'use_factored']

FACTORED_MIN = 4  # both factors at least this (a factor of 2 or 3 leaves matmuls too thin)


def split_factor(n: int) -> tuple[int, int] | None:
    """``(n1, n2)`` with ``n1 * n2 == n``, ``n1 <= n2``, ``n1`` the largest divisor of ``n`` up to
    ``sqrt(n)``; None when ``n1 < FACTORED_MIN`` (prime or nearly)."""
    for n1 in range(math.isqrt(n), FACTORED_MIN - 1, -1):
        if n % n1 == 0:
            return n1, n // n1
    return None


def phase(out_index: Tensor, in_index: Tensor, n: int, sign: float) -> tuple[Tensor, Tensor]:
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


@dataclass(frozen=True)
class Stacked:
    """A stacked spectrum of a channels-last grid: ``data (B, 2, R, cols, C)`` (``factor`` None:
    rows in the band's gather order) or ``(B, n1, 2, n2, cols, C)`` (``factor = (n1, n2)``: row
    ``k = k1 + n1 k2`` at ``[k1, :, k2]``); the axis of 2 holds the real and imaginary parts.
    With ``w_factor = (n1, n2)`` column ``k1 + n1 k2`` is at ``k1 k2w + k2`` (``k2w = ceil(cols
    / n1)``, so some lie past the band's last column; the inverse ignores them)."""
    data: Tensor
    factor: tuple[int, int] | None
    w_factor: tuple[int, int] | None = None

    @property
    def part_axis(self) -> int:
        return 1 if self.factor is None else 2


# A full-band axis is factored from this size up (and when it splits into factors >= 4,
# :func:`split_factor`): the sizes where factoring measured faster (BENCHMARKS.md, "DFT as
# matmuls"; a factored W's second product is a batch of B H n1 small GEMMs).
FACTORED_FROM = {'h': 32, 'w': 256, 'c': 64, 'fnet_h': 64, 'fnet_w': 64}


def use_factored(n: int, axis: str) -> bool:
    """Whether a full-band axis of ``n`` points (``'h'``, ``'w'``, or FNet's ``'c'``,
    ``'fnet_h'``, ``'fnet_w'``) takes the factored form."""
    return split_factor(n) is not None and n >= FACTORED_FROM[axis]


def axis_factor(n: int, axis: str, factored: bool | None) -> tuple[int, int] | None:
    """``(n1, n2)`` when a full-band axis of ``n`` points is factored, else None; ``factored``
    forces the factored form (where ``n`` splits) or the direct one, None asks
    :func:`use_factored`."""
    if factored is None:
        factored = use_factored(n, axis)
    return split_factor(n) if factored else None


def _block(real: Tensor, imag: Tensor) -> Tensor:
    """Complex ``(..., p, q)`` -> real ``(..., 2, p, 2, q)``: ``[[re, -im], [im, re]]``."""
    top = torch.stack([real, -imag], dim=-2)
    bottom = torch.stack([imag, real], dim=-2)
    return torch.stack([top, bottom], dim=-4)


@lru_cache(maxsize=256)
def _matrix(kind: str, n: int, a: int, b: int, dtype: torch.dtype,
            device: torch.device) -> Tensor:
    """One constant (float64, cast, cached), built with torch's dispatch modes off (an export's
    fake tensors never enter the cache; the export stores real constants)."""
    with _disable_current_modes():
        return _build(kind, n, a, b).to(device=device, dtype=dtype).contiguous()


def _twiddled(n: int, n1: int, k2_count: int, n2: int, sign: float) -> tuple[Tensor, Tensor]:
    """``exp(sign 2 pi i m2 (k1 + n1 k2) / n)`` as (cos, sin) of shape ``(n1, k2_count, n2)``:
    the second small DFT of a factored axis with its twiddle, one matrix per ``k1``."""
    k1 = torch.arange(n1)[:, None, None]
    k2 = torch.arange(k2_count)[None, :, None]
    m2 = torch.arange(n2)[None, None, :]
    angle = sign * 2 * math.pi * (m2 * (k1 + n1 * k2)).remainder(n).double() / n
    return torch.cos(angle), torch.sin(angle)


def _build(kind: str, n: int, a: int, b: int) -> Tensor:
    """The constants, scaled by ``1 / sqrt(n)`` once per axis of ``n`` points. Rows are outputs,
    columns inputs; ``(part, i)`` is a stacked index (real, imaginary)::

        'w'       (2, 1, cols, W)  W real -> complex, direct (a = cols)
        'w_inv'   (W, 2 cols)      W complex -> real, direct, Hermitian weights (a = cols)
        'h'       (2R, 2H)         H direct, rows (part, r) (a, b = n_low, n_high)
        'h_inv'   (2H, 2R)         its inverse, rows (h, part)
        'real_rows'     (2a, a)    a-point DFT of a real input, rows (k, part)
        'real_part_fourier' ('_hartley')  (2n, n)  Re (Re - Im) of an n-point DFT
      factored, (a, b) = (n1, n2):
        'f1'  (2 n1, 2 n1)         first DFT, rows (k1, part) (a = n: the direct n-point DFT);
                                   'g1' the inverse's last, rows (m1, part)
        'f2'  (n1, 2 n2, 2 n2)     second DFT with the twiddle, per k1, rows (part, k2);
                                   'f2_rows' rows (k2, part); 'wf2' W's, k2 < ceil(cols / n1)
        'g2'  (2, n1, n2, 2 n2)    the inverse's first, per k1: [part, k1, m2, (part, k2)]
        'wg2' (n1, 2 n2, 2 k2w)    W inverse, first, per k1, rows (part, m2), the Hermitian
                                   weights folded in
        'wg1' (n1, 2 n1)           W inverse, last, real part only, columns (k1, part)
    """
    scale = 1 / math.sqrt(n)
    if kind == 'w':
        cos, sin = phase(torch.arange(a), torch.arange(n), n, -1.0)
        return torch.stack([cos, sin])[:, None] * scale
    if kind == 'w_inv':
        cos, sin = phase(torch.arange(n), torch.arange(a), n, 1.0)
        weight = hermitian_weight(torch.arange(a), n, a)
        return torch.cat([cos * weight, -sin * weight], dim=1) * scale
    if kind in ('h', 'h_inv'):
        freqs = torch.cat([torch.arange(a), torch.arange(n - b, n)])
        if kind == 'h':
            cos, sin = phase(freqs, torch.arange(n), n, -1.0)
        else:
            cos, sin = phase(torch.arange(n), freqs, n, 1.0)
        block = _block(cos * scale, sin * scale)  # (2, out, 2, in)
        rows, cols = 2 * block.shape[1], 2 * block.shape[3]
        if kind == 'h_inv':  # rows (h, part): the W product then takes (part, column) together
            block = block.transpose(0, 1)
        return block.reshape(rows, cols)
    if kind == 'real_rows':
        cos, sin = phase(torch.arange(a), torch.arange(a), a, -1.0)
        return torch.stack([cos, sin], dim=1).reshape(2 * a, a) * scale
    if kind.startswith('real_part'):  # Re(z e^{-i t}) = zr cos t + zi sin t; Hartley: Re - Im
        cos, sin = phase(torch.arange(n), torch.arange(n), n, 1.0)
        if kind.endswith('hartley'):
            cos, sin = cos + sin, sin - cos
        return torch.cat([cos, sin]) * scale
    n1, n2 = a, b
    if kind in ('f1', 'g1'):
        cos, sin = phase(torch.arange(n1), torch.arange(n1), n1, -1.0 if kind == 'f1' else 1.0)
        return _block(cos * scale, sin * scale).transpose(0, 1).reshape(2 * n1, 2 * n1)
    cols = n // 2 + 1  # of a factored W: full band
    k2w = -(-cols // n1)
    if kind in ('f2', 'f2_rows', 'wf2'):
        count = k2w if kind == 'wf2' else n2
        block = _block(*_twiddled(n, n1, count, n2, -1.0))  # (k1, 2, k2, 2, m2)
        if kind == 'f2_rows':
            block = block.transpose(1, 2)
        return block.reshape(n1, 2 * count, 2 * n2)
    if kind == 'g2':
        cos, sin = _twiddled(n, n1, n2, n2, 1.0)  # (k1, k2, m2)
        block = _block(cos.mT, sin.mT)  # (k1, 2, m2, 2, k2)
        return block.transpose(0, 1).reshape(2, n1, n2, 2 * n2)
    if kind == 'wg2':
        cos, sin = _twiddled(n, n1, k2w, n2, 1.0)  # (k1, k2, m2)
        weight = hermitian_weight(torch.arange(n1)[:, None] + n1 * torch.arange(k2w), n, cols)
        block = _block((cos * weight[..., None]).mT, (sin * weight[..., None]).mT)
        return block.reshape(n1, 2 * n2, 2 * k2w)  # (k1, 2, m2, 2, k2)
    if kind == 'wg1':  # the inverse DFT's real part: the conjugate's, transposed
        return _build('real_rows', n, n1, 0).mT
    raise ValueError(f'unknown matrix kind {kind!r}')


def _get(kind: str, n: int, a: int, b: int, like: Tensor) -> Tensor:
    return _matrix(kind, n, a, b, like.dtype, like.device)


def rfft2_grid(grid: Tensor, band, factored: bool | None = None) -> Stacked:
    """``band.gather(rfft2(grid))`` of a channels-last real ``grid (B, H, W, C)``, stacked.

    Args:
        grid (Tensor): ``(B, H, W, C)``.
        band (SpectralBand): The kept modes of the ``H x W`` grid.
        factored (bool, optional): Force the factored form on both axes (a full-band axis that
            splits) or the direct one; None: per axis by :func:`use_factored`. Default: None.

    Returns:
        Stacked: The modes, in the layout it records.
    """
    batch, height, width, channels = grid.shape
    w_full = band.n_cols == band.width // 2 + 1
    w_factor = axis_factor(band.width, 'w', factored) if w_full else None
    spectrum = _rdft_w(grid, band.n_cols, w_factor)  # (B, 2, H, cols, C)
    cols = spectrum.shape[-2]
    flat = spectrum.reshape(batch, 2 * height, cols * channels)  # (part, h) stacked
    factor = axis_factor(band.height, 'h', factored) if band.n_rows == band.height else None
    if factor is None:
        out = _get('h', height, band.n_low, band.n_high, grid) @ flat
        return Stacked(out.reshape(batch, 2, band.n_rows, cols, channels), None, w_factor)
    n1, n2 = factor
    first = _get('f1', height, n1, n2, grid) @ flat.reshape(batch, 2 * n1, n2 * cols * channels)
    first = first.reshape(batch, n1, 2 * n2, cols * channels)  # [k1, (part, m2)]
    out = _get('f2', height, n1, n2, grid) @ first  # [k1, (part, k2)]
    return Stacked(out.reshape(batch, n1, 2, n2, cols, channels), factor, w_factor)


def _rdft_w(grid: Tensor, cols: int, factor: tuple[int, int] | None) -> Tensor:
    """Along W, real -> complex: ``(B, H, W, C) -> (B, 2, H, cols, C)``; factored, the columns
    are ``k = k1 + n1 k2`` at ``k1 * ceil(cols / n1) + k2`` (some past ``cols``)."""
    batch, height, width, channels = grid.shape
    if factor is None:  # (2, 1, cols, W) @ (B, 1, H, W, C)
        return _get('w', width, cols, 0, grid) @ grid.unsqueeze(1)
    n1, n2 = factor
    first = _get('real_rows', width, n1, 0, grid) @ grid.reshape(batch, height, n1, n2 * channels)
    # per k1, (part, k2) from (part, m2): (n1, 2 k2w, 2 n2) @ (B, H, n1, 2 n2, C); the output's
    # part axis in the rows, not a broadcast axis, halves the number of (small) GEMMs
    out = _get('wf2', width, n1, n2, grid) @ first.reshape(batch, height, n1, 2 * n2, channels)
    # the part axis above H: (B, H n1, 2, k2w C) -> (B, 2, H n1, k2w C), runs of k2w C values
    out = out.reshape(batch, height * n1, 2, -1).transpose(1, 2)
    return out.reshape(batch, 2, height, -1, channels)


def _irdft_w(out: Tensor, width: int, factor: tuple[int, int] | None) -> Tensor:
    """Along W, complex -> real: ``(B, H, 2, cols, C) -> (B, H, W, C)``."""
    batch, height, _, cols, channels = out.shape
    if factor is None:  # (W, 2 cols) @ (B, H, 2 cols, C)
        return _get('w_inv', width, cols, 0, out) @ out.reshape(batch, height, 2 * cols, channels)
    n1, n2 = factor
    # (B, H, part, k1, k2 C) -> (B, H, k1, part, k2 C); then per k1 (part, k2) -> (part, m2)
    z = out.reshape(batch, height, 2, n1, -1).transpose(2, 3)
    first = _get('wg2', width, n1, n2, out) @ z.reshape(batch, height, n1, 2 * (cols // n1),
                                                        channels)
    # the real part of the last n1-point product: (n1, (k1, part)) @ (B, H, (k1, part), m2 C)
    last = _get('wg1', width, n1, n2, out) @ first.reshape(batch, height, 2 * n1, n2 * channels)
    return last.reshape(batch, height, width, channels)


def irfft2_grid(spectrum: Stacked, hw_shape: tuple[int, int], band) -> Tensor:
    """``irfft2(band.scatter(modes), s=hw_shape)`` of a :class:`Stacked` spectrum (as
    :func:`rfft2_grid` makes it) -> channels-last real ``(B, H, W, C)``."""
    height, width = hw_shape
    data = spectrum.data
    batch, channels, cols = data.shape[0], data.shape[-1], data.shape[-2]
    if spectrum.factor is None:  # rows (h, part): the W product's (part, column) are adjacent
        flat = data.reshape(batch, 2 * band.n_rows, cols * channels)
        out = _get('h_inv', height, band.n_low, band.n_high, data) @ flat  # (B, H 2, cols C)
    else:
        n1, n2 = spectrum.factor
        first = _get('g2', height, n1, n2, data) @ data.reshape(batch, 1, n1, 2 * n2,
                                                               cols * channels)
        out = _get('g1', height, n1, n2, data) @ first.reshape(batch, 2 * n1, n2 * cols * channels)
        # (B, m1, part, m2, cols C) -> (B, m1, m2, part, cols C): runs of cols C values
        out = out.reshape(batch, n1, 2, n2, cols * channels).transpose(2, 3)
    return _irdft_w(out.reshape(batch, height, 2, cols, channels), width, spectrum.w_factor)


def to_blocks(spectrum: Stacked, num_blocks: int) -> Tensor:
    """The modes as ``(B, k, M, 2 d)`` (channels ``C = k d`` in blocks; per mode the block's d
    real parts, then its d imaginary parts; M modes in the spectrum's order), for AFNO's block
    MLP. Two transposes, each moving one axis (the block axis out, then the part axis in): in
    onnxruntime faster than one that moves both (``BENCHMARKS.md``)."""
    data = spectrum.data
    batch, channels = data.shape[0], data.shape[-1]
    width = channels // num_blocks
    grid = data.reshape(*data.shape[:-1], num_blocks, width).movedim(-2, 1)  # (B, k, ..., d)
    before = math.prod(data.shape[1:spectrum.part_axis])
    grid = grid.reshape(batch, num_blocks, before, 2, -1, width).transpose(3, 4)
    return grid.reshape(batch, num_blocks, -1, 2 * width)


def from_blocks(blocks: Tensor, like: Stacked) -> Stacked:
    """Inverse of :func:`to_blocks` into ``like``'s layout, one transpose."""
    data = like.data
    rest = [size for axis, size in enumerate(data.shape[1:-1], 1) if axis != like.part_axis]
    grid = blocks.reshape(*blocks.shape[:2], *rest, 2, blocks.shape[-1] // 2)
    # (B, k, ..., part, d) -> (B, ..., part at its axis, ..., k, d)
    grid = grid.movedim((1, -2), (-2, like.part_axis))
    return Stacked(grid.reshape(data.shape), like.factor, like.w_factor)


def filter_modes(spectrum: Stacked, kernel: Tensor) -> Stacked:
    """The complex product with ``kernel (C, H, W // 2 + 1)`` (GFN's filter, natural order),
    element-wise in the spectrum's layout."""
    planes = torch.stack([kernel.real, kernel.imag]).permute(0, 2, 3, 1)  # (part, H, cols, C)
    return multiply_planes(spectrum, planes)


def multiply_planes(spectrum: Stacked, planes: Tensor) -> Stacked:
    """The complex product with a filter given as real planes ``(part, H, W // 2 + 1, C)``, or
    ``(B, part, H, W // 2 + 1, C)`` with one filter per image (the dynamic filter), in natural
    order: reordered into the spectrum's layout, then multiplied element-wise."""
    if spectrum.w_factor is not None:  # columns k = k1 + n1 k2 at [k1, k2], zeros past cols
        n1 = spectrum.w_factor[0]
        stored = spectrum.data.shape[-2]
        planes = torch.nn.functional.pad(planes, (0, 0, 0, stored - planes.shape[-2]))
        planes = planes.unflatten(-2, (stored // n1, n1)).transpose(-3, -2).flatten(-3, -2)
    if spectrum.factor is not None:  # rows k = k1 + n1 k2 at [k1, part, k2]
        n1, n2 = spectrum.factor
        lead = planes.dim() - 4  # 1 with a batch axis
        planes = planes.unflatten(lead + 1, (n2, n1)).permute(
            *range(lead), lead + 2, lead, lead + 1, lead + 3, lead + 4)
    part = spectrum.part_axis
    kernel_real, kernel_imag = planes.chunk(2, dim=part - spectrum.data.dim())
    z_real, z_imag = spectrum.data.chunk(2, dim=part)
    product = torch.cat([z_real * kernel_real - z_imag * kernel_imag,
                         z_real * kernel_imag + z_imag * kernel_real], dim=part)
    return Stacked(product, spectrum.factor, spectrum.w_factor)
