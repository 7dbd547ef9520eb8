"""GFN: Global Filter Network token mixer (a learned per-channel filter in the Fourier domain).

References:
    Rao, Zhao, Zhu, Lu, Zhou. "Global Filter Networks for Image Classification." NeurIPS 2021.
    arXiv:2107.00645.
"""
import torch
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant
from .export import gfn_matmul
from .fast import gfn_fast
from .forms import select
from .spectral import irfft2, rfft2, rfft2_flops, run_in_fp32, signed_frequencies

__all__ = ['GlobalFilterMixer', 'resample_filter']


def _linear_taps(positions: Tensor, size: int, periodic: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Neighbour indices and weight of linear interpolation at fractional ``positions``."""
    lower = positions.floor()
    weight = positions - lower
    lower = lower.long()
    upper = lower + 1
    if periodic:
        lower, upper = lower % size, upper % size
    else:
        upper = upper.clamp_max(size - 1)
    return lower, upper, weight


def resample_filter(weight: Tensor, hw_shape: tuple[int, int],
                    base_hw_shape: tuple[int, int]) -> Tensor:
    """A half-spectrum filter of the base grid ``(H0, W0)`` resampled for ``(H, W)`` at equal
    frequency in cycles per pixel: entry ``(k, j)`` is read at base position ``(k H0 / H,
    j W0 / W)`` (``k`` signed) by linear interpolation, wrapping along the full (periodic) axis,
    clamped at the base Nyquist column along the half axis.

    Args:
        weight (Tensor): ``(H0, W0 // 2 + 1, ...)`` real tensor (e.g. ``(..., C, 2)``).
        hw_shape (tuple[int, int]): Target grid ``(H, W)``.
        base_hw_shape (tuple[int, int]): Base grid ``(H0, W0)`` of ``weight``.

    Returns:
        Tensor: ``(H, W // 2 + 1, ...)``; ``weight`` itself when the grids are equal.
    """
    (height, width), (base_height, base_width) = hw_shape, base_hw_shape
    if (height, width) == (base_height, base_width):
        return weight
    device = weight.device
    row_positions = signed_frequencies(height).double() * (base_height / height)
    lower, upper, frac = _linear_taps(row_positions, base_height, periodic=True)
    frac = frac.to(device, weight.dtype).view(-1, *[1] * (weight.dim() - 1))
    weight = torch.lerp(weight[lower.to(device)], weight[upper.to(device)], frac)
    col_positions = (torch.arange(width // 2 + 1).double() * (base_width / width)).clamp_max(
        base_width // 2)
    lower, upper, frac = _linear_taps(col_positions, base_width // 2 + 1, periodic=False)
    frac = frac.to(device, weight.dtype).view(-1, *[1] * (weight.dim() - 2))
    return torch.lerp(weight[:, lower.to(device)], weight[:, upper.to(device)], frac)


@register_model
class GlobalFilterMixer(TokenMixer):
    """Global filter mixer (Rao et al. 2021): ``out = irfft2(rfft2(X) * K)``.

    ``K`` is complex ``(H, W//2+1, C)``: a circular convolution per channel, so exactly
    equivariant to circular shifts; no residual. ``K`` is stored at ``base_hw_shape``
    (``complex_weight (H0, W0//2+1, C, 2)``, GFNet's layout) and resampled for other grids
    (:func:`resample_filter`). Spectral work in float32. Forms (:mod:`.forms`): ``fast`` a
    written-out backward (:func:`.fast.gfn_fast`), ``matmul`` :mod:`.export`'s DFT.

    Cost (:meth:`flops`): ``2 rfft2`` plus 6 FLOPs per complex product, ``6 C H (W//2+1)``.

    Args:
        embed_dims (int): Channels C.
        base_hw_shape (tuple[int, int]): Grid the filter is stored at. Default: (64, 64).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'gfn': Variant('GFN')}
    # Stored at 8 x 8: the suites' other grids (non-square, odd) run through the resampling.
    example_args = dict(base_hw_shape=(8, 8))
    extra_examples = {'base-grid-6x10': dict(base_hw_shape=(6, 10))}
    flop_terms = ('fft', 'filter')
    forms = {'fast': gfn_fast, 'matmul': gfn_matmul}

    def __init__(self, embed_dims: int, base_hw_shape: tuple[int, int] = (64, 64),
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.base_hw_shape = tuple(int(size) for size in base_hw_shape)
        if len(self.base_hw_shape) != 2 or min(self.base_hw_shape) < 1:
            raise ValueError(f'base_hw_shape must be two positive sizes, got {base_hw_shape}')
        base_height, base_width = self.base_hw_shape
        self.complex_weight = nn.Parameter(
            0.02 * torch.randn(base_height, base_width // 2 + 1, embed_dims, 2))

    def filter_at(self, hw_shape: tuple[int, int], dtype: torch.dtype | None = None) -> Tensor:
        """The complex filter ``(H, W // 2 + 1, C)`` of an ``H x W`` grid, in real ``dtype``."""
        weight = self.complex_weight.to(dtype or self.complex_weight.dtype)
        weight = resample_filter(weight, tuple(hw_shape), self.base_hw_shape)
        return torch.view_as_complex(weight.contiguous())

    def kernel(self, hw_shape: tuple[int, int], dtype: torch.dtype) -> Tensor:
        """The filter channels first, ``(C, H, W // 2 + 1)``."""
        return self.filter_at(hw_shape, dtype).permute(2, 0, 1)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        return irfft2(rfft2(x, hw_shape) * self.kernel(hw_shape, x.dtype), hw_shape)

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'filter': 6 FLOPs per complex product}``."""
        height, width = hw_shape
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'filter': 6.0 * self.embed_dims * height * (width // 2 + 1),
        }
