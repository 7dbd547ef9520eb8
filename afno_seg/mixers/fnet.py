"""FNet: parameter-free Fourier token mixing (real part of a 3-D DFT over grid and channels).

References:
    Lee-Thorp, Ainslie, Eckstein, Ontanon. "FNet: Mixing Tokens with Fourier Transforms."
    NAACL 2022. arXiv:2105.03824.
"""
from torch import Tensor

from ..registry import register_model
from .base import TokenMixer, Variant
from .export import fnet_matmul
from .fast import fnet_fast
from .forms import select
from .spectral import fft3, fft_flops, run_in_fp32

__all__ = ['FNetMixer']

TRANSFORMS = ('fourier', 'hartley')


@register_model
class FNetMixer(TokenMixer):
    """FNet mixer (Lee-Thorp et al. 2021): ``out = Re(F_H F_W F_C X)``, no parameters.

    Orthonormal DFT over ``(H, W, C)``, so the mixer has unit gain. ``transform='hartley'`` gives
    ``Re(F X) - Im(F X)`` instead (real, orthonormal, its own inverse). Spectral work in float32.
    Forms (:mod:`.forms`): ``fast`` one op from the half spectrum, its own backward
    (:func:`.fast.fnet_fast`); ``matmul`` the DFT as three real products (:mod:`.export.fnet`).

    Cost (:meth:`flops`): ``2.5 N log2 N`` with ``N = HWC`` (a real-input transform; torch runs
    it as a complex one, which a traced counter sees as twice that).

    Args:
        embed_dims (int): Channels C.
        transform (str): ``'fourier'`` (real part) or ``'hartley'``. Default: 'fourier'.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'fnet': Variant('FNet')}
    extra_examples = {'hartley': dict(transform='hartley')}
    flop_terms = ('fft', )
    forms = {'fast': fnet_fast, 'matmul': fnet_matmul}

    def __init__(self, embed_dims: int, transform: str = 'fourier',
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        if transform not in TRANSFORMS:
            raise ValueError(f'transform must be one of {TRANSFORMS}, got {transform!r}')
        self.transform = transform

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = fft3(x, hw_shape)
        return spectrum.real - spectrum.imag if self.transform == 'hartley' else spectrum.real

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': 2.5 N log2 N}``, ``N = HWC``."""
        return {'fft': fft_flops(hw_shape[0] * hw_shape[1] * self.embed_dims, real=True)}
