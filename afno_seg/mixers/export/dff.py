"""The dynamic filter's ``matmul`` form (:class:`afno_seg.mixers.dff.DynamicFilterMixer`): the
routed filters built and applied as real planes, :mod:`.dft`'s transforms, no complex tensor."""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..spectral import SpectralBand
from .dft import Stacked, irfft2_grid, rfft2_grid

__all__ = ['dff_matmul']


def _in_layout(kernel: Tensor, spectrum: Stacked) -> Tensor:
    """Per-image planes ``(B, 2, H, W//2+1, D)`` in natural order -> ``spectrum``'s layout (as
    :func:`.dft.filter_modes` reorders GFN's filter, with a batch axis)."""
    if spectrum.w_factor is not None:  # column k1 + n1 k2 at k1 ceil(cols / n1) + k2
        n1, stored = spectrum.w_factor[0], spectrum.data.shape[-2]
        kernel = F.pad(kernel, (0, 0, 0, stored - kernel.shape[3]))
        kernel = kernel.unflatten(3, (stored // n1, n1)).transpose(3, 4).flatten(3, 4)
    if spectrum.factor is not None:  # row k1 + n1 k2 at [k1, part, k2]
        n1, n2 = spectrum.factor
        kernel = kernel.unflatten(2, (n2, n1)).permute(0, 3, 1, 2, 4, 5)
    return kernel


def dff_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``project(irfft2(rfft2(expand(x)) * G))``; ``G``'s real and imaginary planes are one
    product of the filter planes with the routing."""
    height, width = hw_shape
    band = SpectralBand.fraction(hw_shape, 1.0)
    planes = mixer.filters_at(hw_shape, x.dtype).permute(3, 0, 1, 2)  # (2, H, W', K)
    kernel = planes.reshape(-1, mixer.num_filters) @ mixer.routing(x)  # (B, 2 H W', D)
    kernel = kernel.view(x.shape[0], 2, height, -1, kernel.shape[-1])
    spectrum = rfft2_grid(mixer.expand(x).reshape(x.shape[0], height, width, -1), band)
    part = spectrum.part_axis
    real, imag = spectrum.data.chunk(2, dim=part)
    kernel_real, kernel_imag = _in_layout(kernel, spectrum).chunk(2, dim=part)
    product = torch.cat([real * kernel_real - imag * kernel_imag,
                         real * kernel_imag + imag * kernel_real], dim=part)
    product = Stacked(product, spectrum.factor, spectrum.w_factor)
    return mixer.project(irfft2_grid(product, hw_shape, band).flatten(1, 2))
