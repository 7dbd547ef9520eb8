"""The dynamic filter's ``matmul`` form (:class:`afno_seg.mixers.dff.DynamicFilterMixer`): the
routed filters built and applied as real planes, :mod:`.dft`'s transforms, no complex tensor."""
from torch import Tensor

from ..spectral import SpectralBand
from .dft import irfft2_grid, multiply_planes, rfft2_grid

__all__ = ['dff_matmul']


def dff_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """``project(irfft2(rfft2(expand(x)) * G))``; ``G``'s real and imaginary planes are one
    product of the filter planes with the routing."""
    height, width = hw_shape
    band = SpectralBand.fraction(hw_shape, 1.0)
    planes = mixer.filters_at(hw_shape, x.dtype).permute(3, 0, 1, 2)  # (2, H, W', K)
    kernel = planes.reshape(-1, mixer.num_filters) @ mixer.routing(x)  # (B, 2 H W', D)
    kernel = kernel.view(x.shape[0], 2, height, -1, kernel.shape[-1])
    spectrum = rfft2_grid(mixer.expand(x).reshape(x.shape[0], height, width, -1), band)
    product = multiply_planes(spectrum, kernel)
    return mixer.project(irfft2_grid(product, hw_shape, band).flatten(1, 2))
