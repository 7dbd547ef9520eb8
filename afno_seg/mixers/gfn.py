"""GFN: Global Filter Network token mixer (a learned per-channel filter in the Fourier domain).

References:
    Rao, Zhao, Zhu, Lu, Zhou. "Global Filter Networks for Image Classification." NeurIPS 2021.
    arXiv:2107.00645.
"""
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..registry import register_model
from .base import TokenMixer, Variant
from .spectral import (
    grid_to_tokens,
    hermitian_column_weight,
    irfft2_to_tokens,
    rfft2_flops,
    rfft2_of_tokens,
    run_in_fp32,
    signed_frequencies,
    spectrum_to_grid,
    tokens_to_spectrum,
)

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
    """Resize a half-spectrum filter from the base grid to ``hw_shape`` at equal physical frequency.

    The filter is a function of frequency in cycles per pixel: entry ``(k, j)`` of an ``H x W`` grid
    sits at ``(k / H, j / W)``. It is sampled at the same frequency on the base grid
    ``(H0, W0)``, i.e. at base positions ``(k H0 / H, j W0 / W)``, by bilinear interpolation of
    the real and imaginary parts. Along the full axis the spectrum is periodic (``k`` and ``k + H0``
    are the same frequency), so the interpolation wraps (with ``k`` the signed frequency, DC stays
    at DC and ``+-1/H`` fall between base DC and ``+-1/H0``); along the half axis it is clamped at
    the base Nyquist column. On even sizes the half axis matches ``F.interpolate(...,
    align_corners=True)``; on the full axis ``F.interpolate`` in FFT order is not used because it
    would treat DC and the last row (frequency ``-1/H0``) as the two far ends of the range.

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
    """Global filter mixer (Rao et al. 2021): a learned complex filter per channel and frequency.

    ``out = irfft2(rfft2(X) * K)``, both transforms orthonormal over the grid, ``K`` complex of
    shape ``(H, W // 2 + 1, C)``. Circular convolution with a learned per-channel kernel, hence
    exactly equivariant to circular shifts of the grid. No internal residual (the encoder layer
    adds it).

    The filter is stored at ``base_hw_shape`` (``complex_weight``: ``(H0, W0 // 2 + 1, C, 2)``, the
    GFNet layout; init ``0.02 * randn`` as GFNet). On any other grid it is resized by
    :func:`resample_filter` (bilinear at equal frequency in cycles per pixel), so a model trained
    on 1024 x 1024 crops runs on whole 1024 x 2048 images; set ``base_hw_shape`` to the stage's
    training grid (e.g. 256 x 256 for stage 1 of SegFormer at a 1024 crop).

    Numerics: float32 with autocast off, result cast back to the input dtype. By default
    (``fused``) the transforms and the product are one autograd function whose backward is
    written out (:class:`_SpectralFilter`); ``fused=False`` composes them from differentiable
    pieces (the reference it is tested against).
    Parameters: ``2 H0 (W0 // 2 + 1) C``. Cost per image (:meth:`flops`): ``rfft2 + irfft2 =
    2 * 2.5 C HW log2(HW)``, plus 6 FLOPs per complex product, ``6 C H (W // 2 + 1)`` (the filter
    resize is element-wise and batch-independent; not counted).

    Args:
        embed_dims (int): Channels C.
        base_hw_shape (tuple[int, int]): Grid at which the filter is stored. Default: (64, 64).
        fused (bool): One autograd function with a hand-written backward. Default: True.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {
        'gfn': Variant('GFN'),
        'gfn-composed': Variant('GFN (composed reference)', dict(fused=False), listed=False),
    }
    # Stored at 8 x 8: the suites' other grids (non-square, odd) run through the resampling.
    example_args = dict(base_hw_shape=(8, 8))
    extra_examples = {'base-grid-6x10': dict(base_hw_shape=(6, 10))}
    spectral = True
    stores_grid = True
    flop_terms = ('fft', 'filter')

    def __init__(self, embed_dims: int, base_hw_shape: tuple[int, int] = (64, 64),
                 fused: bool = True, init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.fused = bool(fused)
        self.base_hw_shape = tuple(int(size) for size in base_hw_shape)
        if len(self.base_hw_shape) != 2 or min(self.base_hw_shape) < 1:
            raise ValueError(f'base_hw_shape must be two positive sizes, got {base_hw_shape}')
        base_height, base_width = self.base_hw_shape
        self.complex_weight = nn.Parameter(
            0.02 * torch.randn(base_height, base_width // 2 + 1, embed_dims, 2))

    def filter_at(self, hw_shape: tuple[int, int], dtype: torch.dtype | None = None) -> Tensor:
        """The complex filter ``(H, W // 2 + 1, C)`` used on an ``H x W`` grid.

        ``dtype`` is the real dtype to compute it in (default: the parameter's).
        """
        weight = self.complex_weight.to(dtype or self.complex_weight.dtype)
        weight = resample_filter(weight, tuple(hw_shape), self.base_hw_shape)
        return torch.view_as_complex(weight.contiguous())

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(self._forward_fp32, x, tuple(hw_shape))

    def _forward_fp32(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        kernel = self.filter_at(hw_shape, x.dtype).permute(2, 0, 1)  # (C, H, W//2+1)
        if self.fused:
            return _SpectralFilter.apply(x, kernel, hw_shape)
        spectrum = tokens_to_spectrum(x, hw_shape)  # (B, C, H, W//2+1)
        return grid_to_tokens(spectrum_to_grid(spectrum * kernel, hw_shape))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'filter': 6 FLOPs per complex product}``."""
        height, width = hw_shape
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'filter': 6.0 * self.embed_dims * height * (width // 2 + 1),
        }


class _SpectralFilter(torch.autograd.Function):
    """``irfft2(rfft2(X) * K)`` on tokens, with the backward written out.

    With ``G = rfft2(dY)``: ``dX = irfft2(G * conj(K))`` (the Hermitian column weights of the two
    adjoint transforms cancel, see :mod:`.spectral`) and ``dK = (1/w) sum_b G * conj(Z)`` (the
    weight applied once to the batch-summed filter gradient). Against the composed path this
    drops the two weight passes over the spectrum and autograd's intermediate buffers.
    """

    @staticmethod
    def forward(ctx, x: Tensor, kernel: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = rfft2_of_tokens(x, hw_shape)
        ctx.hw_shape = hw_shape
        ctx.save_for_backward(spectrum if ctx.needs_input_grad[1] else None, kernel)
        return irfft2_to_tokens(spectrum * kernel, hw_shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        spectrum, kernel = ctx.saved_tensors
        grad = rfft2_of_tokens(grad_out, ctx.hw_shape)
        grad_kernel = grad_x = None
        if ctx.needs_input_grad[1]:
            weight = hermitian_column_weight(ctx.hw_shape[1], dtype=grad.real.dtype,
                                             device=grad.device)
            grad_kernel = (grad * spectrum.conj()).sum(0).div_(weight)
        if ctx.needs_input_grad[0]:
            grad_x = irfft2_to_tokens(grad.mul_(kernel.conj()), ctx.hw_shape)
        return grad_x, grad_kernel, None
