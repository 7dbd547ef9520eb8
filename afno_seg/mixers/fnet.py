"""FNet: parameter-free Fourier token mixing (real part of a 3-D DFT over grid and channels).

References:
    Lee-Thorp, Ainslie, Eckstein, Ontanon. "FNet: Mixing Tokens with Fourier Transforms."
    NAACL 2022. arXiv:2105.03824.
"""
from torch import Tensor

from ..registry import register_model
from .base import TokenMixer, Variant
from .dft_matmul import current_dft_mode
from .dft_tokens import fnet_tokens
from .spectral import fft3, fft_flops, run_in_fp32
from .spectral_fast import fnet_by_matmul

__all__ = ['FNetMixer']

TRANSFORMS = ('fourier', 'hartley')
# dft_matmul='auto' takes the matmul path while max(H, W) <= this, per device type; only measured
# entries belong here (on CPU the FFT won at every size, BENCHMARKS.md).
AUTO_MATMUL_MAX_SIZE = {'cpu': 0}


@register_model
class FNetMixer(TokenMixer):
    """FNet mixer (Lee-Thorp et al. 2021): ``out = Re(F_H F_W F_C X)``, no parameters.

    Orthonormal DFT over ``(H, W, C)``, so the mixer has unit gain. ``transform='hartley'`` gives
    ``Re(F X) - Im(F X)`` instead (real, orthonormal, its own inverse). Spectral work in float32.

    Cost (:meth:`flops`, the path ``forward`` takes on CPU): ``fft`` ``2.5 N log2 N`` with
    ``N = HWC`` (a real-input transform; torch runs it as a complex one, which a traced counter
    sees as twice that), or ``dft_matmul`` ``2 N (2H + 4W + 2C)``.

    Args:
        embed_dims (int): Channels C.
        transform (str): ``'fourier'`` (real part) or ``'hartley'``. Default: 'fourier'.
        dft_matmul (bool | str): Force the DFT-by-matmul path (:func:`.spectral_fast.
            fnet_by_matmul`) or the FFT; ``'auto'`` picks by device and grid size
            (``AUTO_MATMUL_MAX_SIZE``). Default: 'auto'.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'fnet': Variant('FNet')}
    example_args = dict(dft_matmul=False)
    extra_examples = {'matmul-hartley': dict(dft_matmul=True, transform='hartley')}
    flop_terms = ('fft', 'dft_matmul')  # one of the two, by path

    def __init__(self, embed_dims: int, transform: str = 'fourier',
                 dft_matmul: bool | str = 'auto', init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        if transform not in TRANSFORMS:
            raise ValueError(f'transform must be one of {TRANSFORMS}, got {transform!r}')
        if dft_matmul not in (True, False, 'auto'):
            raise ValueError(f"dft_matmul must be True, False or 'auto', got {dft_matmul!r}")
        self.transform = transform
        self.dft_matmul = dft_matmul

    def uses_matmul(self, hw_shape: tuple[int, int], device_type: str = 'cpu') -> bool:
        """Whether ``forward`` takes the DFT-by-matmul path on an ``H x W`` grid."""
        if self.dft_matmul == 'auto':
            return max(hw_shape) <= AUTO_MATMUL_MAX_SIZE.get(device_type, 0)
        return bool(self.dft_matmul)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        if self.uses_matmul(hw_shape, x.device.type):
            return run_in_fp32(fnet_by_matmul, x, tuple(hw_shape), self.transform)
        return run_in_fp32(self._formula, x, tuple(hw_shape))

    def _formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        if current_dft_mode() == 'matmul':  # the export's form: the real part only
            return fnet_tokens(x, hw_shape, self.transform)
        spectrum = fft3(x, hw_shape)
        return spectrum.real - spectrum.imag if self.transform == 'hartley' else spectrum.real

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': 2.5 N log2 N}`` or ``{'dft_matmul': 2 N (2H + 4W + 2C)}``, ``N = HWC``."""
        height, width = hw_shape
        num_points = height * width * self.embed_dims
        if self.uses_matmul(hw_shape):
            return {'dft_matmul': 2.0 * num_points * (2 * height + 4 * width + 2 * self.embed_dims)}
        return {'fft': fft_flops(num_points, real=True)}
