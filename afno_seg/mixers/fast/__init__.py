"""The ``fast`` forms of the spectral mixers (:mod:`..forms`): the same functions as their
formulas with a cheaper backward (hand-written, or adjoint transforms)."""
from torch import Tensor

from .afno import fused_afno
from .transforms import spectral_filter

__all__ = ['adjoint_transforms', 'afno_fast', 'gfn_fast']


def adjoint_transforms(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """The formula with the adjoint-gradient ``rfft2``/``irfft2`` (:mod:`.transforms`)."""
    return mixer.formula(x, hw_shape, fast=True)


def afno_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """:func:`fused_afno` for the split shrink; the magnitude shrink on adjoint transforms."""
    if mixer.shrink != 'split':
        return adjoint_transforms(mixer, x, hw_shape)
    return fused_afno(x, mixer.weights(), hw_shape, mixer.band(hw_shape),
                      mixer.sparsity_threshold)


def gfn_fast(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    """GFN's filter with its written-out backward (:func:`spectral_filter`)."""
    return spectral_filter(x, mixer.kernel(hw_shape, x.dtype), hw_shape)
