"""FNO: Fourier Neural Operator spectral convolution as a token mixer.

References:
    Li, Kovachki, Azizzadenesheli, Liu, Bhattacharya, Stuart, Anandkumar. "Fourier Neural Operator
    for Parametric Partial Differential Equations." ICLR 2021. arXiv:2010.08895.
"""
import torch
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant
from .export import fno_matmul, fno_op
from .fast import fno_fast
from .forms import select
from .spectral import SpectralBand, irfft2, rfft2, rfft2_flops, run_in_fp32

__all__ = ['FNOMixer']


@register_model
class FNOMixer(TokenMixer):
    """FNO spectral convolution (Li et al. 2020): a dense complex ``C x C`` weight per kept mode.

    ``out = irfft2(Z R)``, ``Z = rfft2(X)``, per kept mode ``(k, j)`` the row ``Z[k, j] R[k, j]``
    (0 elsewhere). Kept (:meth:`SpectralBand.lowpass`): rows ``|k| < modes[0]`` (both signs),
    columns ``j < modes[1]``, those a smaller grid has. Linear and diagonal in frequency, hence
    shift-equivariant; no residual. Spectral work in float32. Forms (:mod:`.forms`): ``fast``
    one op with its backward written out (:func:`.fast.fno_fast`), ``op`` and ``matmul`` real
    arithmetic (:mod:`.export`).

    Parameters: ``weight (2 m0 - 1, m1, C, C, 2)`` (rows in FFT order ``0..m0-1, -(m0-1)..-1``),
    ``2 (2 m0 - 1) m1 C^2`` reals: 260 M per layer at C = 512 and (16, 16) modes.
    Cost (:meth:`flops`): ``2 rfft2`` plus ``8 C^2`` per kept mode.

    Args:
        embed_dims (int): Channels C.
        modes (tuple[int, int]): Kept frequencies m0 along H (per sign) and m1 along the half
            axis. Default: (16, 16).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'fno': Variant('FNO (16x16 modes)', dict(modes=(16, 16)))}
    example_args = dict(modes=(3, 4))
    flop_terms = ('fft', 'spectral_weights')
    forms = {'fast': fno_fast, 'op': fno_op, 'matmul': fno_matmul}
    # The band is sized in Python per grid: torch.export cannot keep H, W symbolic through it.
    onnx_dynamic_shape = False

    def __init__(self, embed_dims: int, modes: tuple[int, int] = (16, 16),
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.modes = tuple(int(m) for m in modes)
        if len(self.modes) != 2 or min(self.modes) < 1:
            raise ValueError(f'modes must be two positive counts, got {modes}')
        row_modes, col_modes = self.modes
        self.weight = nn.Parameter(
            0.02 * torch.randn(2 * row_modes - 1, col_modes, embed_dims, embed_dims, 2))

    def band(self, hw_shape: tuple[int, int]) -> SpectralBand:
        """The modes kept on an ``H x W`` grid."""
        return SpectralBand.lowpass(tuple(hw_shape), *self.modes)

    def weight_at(self, band: SpectralBand, dtype: torch.dtype) -> Tensor:
        """Complex weights ``(n_rows * n_cols, C, C)`` of the band's modes, in gather order."""
        weight = self.weight.to(dtype)
        if band.n_low < self.modes[0] or band.n_high < self.modes[0] - 1:
            low = weight[:band.n_low]
            high = weight[weight.shape[0] - band.n_high:] if band.n_high else low[:0]
            weight = torch.cat([low, high])
        weight = weight[:, :band.n_cols].reshape(band.num_modes, *weight.shape[2:])
        return torch.view_as_complex(weight)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        band = self.band(hw_shape)
        z = rfft2(x, hw_shape, band)  # (B, C, rows, cols)
        mixed = torch.bmm(z.flatten(2).permute(2, 0, 1), self.weight_at(band, x.dtype))  # (M, B, C)
        return irfft2(mixed.permute(1, 2, 0).reshape(z.shape), hw_shape, band)

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'spectral_weights': 8 C^2 per kept mode}``."""
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'spectral_weights': self.band(hw_shape).num_modes * 8.0 * self.embed_dims ** 2,
        }
