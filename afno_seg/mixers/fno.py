"""FNO: Fourier Neural Operator spectral convolution as a token mixer.

References:
    Li, Kovachki, Azizzadenesheli, Liu, Bhattacharya, Stuart, Anandkumar. "Fourier Neural Operator
    for Parametric Partial Differential Equations." ICLR 2021. arXiv:2010.08895.
"""
import torch
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant
from .spectral import (
    SpectralBand,
    grid_to_tokens,
    rfft2_flops,
    run_in_fp32,
    spectrum_to_grid,
    tokens_to_spectrum,
)

__all__ = ['FNOMixer']


@register_model
class FNOMixer(TokenMixer):
    """FNO spectral convolution (Li et al. 2020): a dense complex C x C weight per kept mode.

    ``out = irfft2(R . rfft2(X))`` with ``(R . Z)[k, j] = Z[k, j] R[k, j]`` (``Z[k, j]`` a length-C
    row, ``R[k, j]`` complex ``C x C``) on the kept modes and 0 elsewhere. Kept modes
    (:meth:`SpectralBand.lowpass`): rows with signed frequency ``|k| < modes[0]`` (both signs,
    ``2 modes[0] - 1`` rows) and columns ``j < modes[1]`` of the ``rfft2`` spectrum. On grids with
    fewer frequencies than that, the modes that exist are used with their own weights. Linear in X
    and diagonal in frequency, hence exactly equivariant to circular shifts of the grid. The FNO
    layer's pointwise linear term and activation are the encoder layer's MLP here; no residual.

    Parameters GROW WITH THE KEPT MODES: ``weight`` is ``(2 modes[0] - 1, modes[1], C, C, 2)``
    (rows in FFT order ``0 .. m-1, -(m-1) .. -1``; last axis real, imaginary; init
    ``0.02 * randn``), i.e. ``2 (2 m0 - 1) m1 C^2`` reals; at modes (16, 16) that is ``992 C^2``:
    4.1 M at C = 64, 16.3 M at C = 128, 101.6 M at C = 320, 260 M at C = 512 (per layer). Choose
    ``modes`` per stage accordingly.

    Numerics: float32 with autocast off, result cast back to the input dtype. The per-mode products
    are one complex ``bmm`` batched over the kept modes. Cost per image (:meth:`flops`):
    ``rfft2 + irfft2 = 2 * 2.5 C HW log2(HW)`` plus ``8 C^2`` per kept mode.

    Args:
        embed_dims (int): Channels C.
        modes (tuple[int, int]): Kept frequencies along H (per sign) and along the half axis W.
            Default: (16, 16).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'fno': Variant('FNO (16x16 modes)', dict(modes=(16, 16)))}
    example_args = dict(modes=(3, 4))
    spectral = True
    flop_terms = ('fft', 'spectral_weights')

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
        return run_in_fp32(self._forward_fp32, x, tuple(hw_shape))

    def _forward_fp32(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        band = self.band(hw_shape)
        modes = band.gather(tokens_to_spectrum(x, hw_shape))  # (B, C, rows, cols)
        batch, channels, rows, cols = modes.shape
        # (B, C, M) -> (M, B, C): one complex bmm over the kept modes, (M, B, C) @ (M, C, C).
        mixed = torch.bmm(modes.reshape(batch, channels, rows * cols).permute(2, 0, 1),
                          self.weight_at(band, x.dtype))
        mixed = mixed.permute(1, 2, 0).reshape(batch, channels, rows, cols)
        return grid_to_tokens(spectrum_to_grid(band.scatter(mixed), hw_shape))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'spectral_weights': 8 C^2 per kept mode}``."""
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'spectral_weights': self.band(hw_shape).num_modes * 8.0 * self.embed_dims ** 2,
        }
