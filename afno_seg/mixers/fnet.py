"""FNet: parameter-free Fourier token mixing (real part of a 3-D DFT over grid and channels).

References:
    Lee-Thorp, Ainslie, Eckstein, Ontanon. "FNet: Mixing Tokens with Fourier Transforms."
    NAACL 2022. arXiv:2105.03824.
"""
import math
from functools import lru_cache

import torch
from torch import Tensor

from ..registry import register_model
from .base import TokenMixer, Variant
from .spectral import fft_flops, grid_to_tokens, run_in_fp32, tokens_to_grid

__all__ = ['FNetMixer']

TRANSFORMS = ('fourier', 'hartley')
# dft_matmul='auto' takes the matmul path while max(H, W) <= this, per device type. Only measured
# entries belong here: on the CPUs measured the FFT was faster at every size (BENCHMARKS.md), and
# devices without a measurement use the FFT.
AUTO_MATMUL_MAX_SIZE = {'cpu': 0}


@lru_cache(maxsize=64)
def _dft_matrix(size: int, kind: str, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Orthonormal DFT pieces ``C = cos(2 pi jk / n) / sqrt(n)``, ``S = sin(..)`` (``F = C - iS``).

    ``kind``: ``'real_to_complex'`` ``[C; -S]`` (2n x n, rows: real then imaginary output);
    ``'complex'`` the complex ``C - iS``; ``'fourier'`` / ``'hartley'`` the ``(2n x n)`` real matrix
    that maps interleaved ``[re, im]`` inputs to ``Re(F z)`` / ``Re(F z) - Im(F z)``.
    """
    index = torch.arange(size, dtype=torch.float64)
    angle = 2 * math.pi * torch.outer(index, index).remainder(size) / size
    cos, sin = torch.cos(angle) / math.sqrt(size), torch.sin(angle) / math.sqrt(size)
    if kind == 'real_to_complex':
        matrix = torch.cat([cos, -sin])
    elif kind == 'complex':
        matrix = torch.complex(cos, -sin)
    elif kind == 'fourier':  # Re(F z) = C zr + S zi
        matrix = torch.stack((cos, sin), dim=1).reshape(2 * size, size)
    else:  # Re - Im = (C + S) zr + (S - C) zi
        matrix = torch.stack((cos + sin, sin - cos), dim=1).reshape(2 * size, size)
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return matrix.to(device, complex_dtype if matrix.is_complex() else dtype)


@register_model
class FNetMixer(TokenMixer):
    """FNet mixer (Lee-Thorp et al. 2021): ``Re(F_H F_W F_C X)``, no parameters.

    The DFT runs over the three axes ``(H, W, C)`` of the grid with ``norm='ortho'``, so the mixer
    has unit gain (the orthonormal DFT preserves the norm and taking the real part cannot increase
    it), which suits SegFormer's pre-norm layers. ``transform='hartley'`` returns the discrete
    Hartley transform ``Re(F X) - Im(F X)`` instead: real-to-real, orthonormal and invertible.

    Two paths compute the same thing:

    * ``fft``: ``torch.fft.fftn`` over ``dim=(1, 2, 3)``; ``2.5 N log2 N`` FLOPs, ``N = HWC``.
    * DFT by matmul: one real matmul along H (real -> complex), one complex matmul along W and one
      real matmul along C on the interleaved ``[re, im]`` layout (complex -> real); the matrices are
      cached per size, device and dtype. ``2 HWC (2H + 4W + 2C)`` FLOPs: more arithmetic, for
      devices where dense GEMMs beat an FFT's overheads on small grids (not the CPU, below).

    ``dft_matmul='auto'`` takes the matmul path only where it was measured faster, per device type
    (``AUTO_MATMUL_MAX_SIZE``). On the CPU the FFT was faster at every size tried (numbers in
    ``BENCHMARKS.md``), so 'auto' means FFT there: one FFT call beats three GEMM launches even at
    4x4, and the channel axis alone costs ``2C`` multiply-adds per element by matmul against
    ``~2.5 log2(HWC)`` FLOPs for the whole FFT. A device that measures otherwise gets an entry in
    the table (e.g. GPUs, unmeasured here).

    Numerics: float32 with autocast off, result cast back to the input dtype.
    :meth:`flops` reports the path that ``forward`` takes at that grid on the CPU. The FFT term
    follows the project convention for a real-input transform, ``2.5 N log2 N``; torch computes
    ``fftn`` of a real tensor as a complex transform of its complex copy (``5 N log2 N`` in the
    same count): a traced counter sees twice the analytic number. (An ``rfftn`` plus a gather of
    the mirrored half was not faster here.)

    Args:
        embed_dims (int): Channels C.
        transform (str): ``'fourier'`` (real part) or ``'hartley'``. Default: ``'fourier'``.
        dft_matmul (bool | str): ``True`` / ``False`` force the matmul / FFT path; ``'auto'`` picks
            by device and grid size from measurements. Default: ``'auto'``.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'fnet': Variant('FNet')}
    example_args = dict(dft_matmul=False)
    extra_examples = {'matmul-hartley': dict(dft_matmul=True, transform='hartley')}
    spectral = True
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
        use_matmul = self.uses_matmul(hw_shape, x.device.type)
        path = self._dft_by_matmul if use_matmul else self._dft_by_fft
        return run_in_fp32(path, x, tuple(hw_shape))

    def _dft_by_fft(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = torch.fft.fftn(tokens_to_grid(x, hw_shape), dim=(1, 2, 3), norm='ortho')
        if self.transform == 'hartley':
            return grid_to_tokens(spectrum.real - spectrum.imag)
        return grid_to_tokens(spectrum.real)

    def _dft_by_matmul(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        (height, width), (batch, _, channels) = hw_shape, x.shape
        device, dtype = x.device, x.dtype
        # Along H, real -> complex: [C; -S] @ (B, H, W*C) gives real rows then imaginary rows.
        stacked = _dft_matrix(height, 'real_to_complex', device, dtype) @ x.reshape(
            batch, height, width * channels)
        spectrum = torch.complex(stacked[:, :height], stacked[:, height:])
        # Along W, complex: (W x W) @ (B*H, W, C).
        spectrum = _dft_matrix(width, 'complex', device, dtype) @ spectrum.reshape(
            batch * height, width, channels)
        # Along C, complex -> real: interleaved (.., 2C) @ (2C x C); view_as_real needs no copy.
        interleaved = torch.view_as_real(spectrum).reshape(batch, height * width, 2 * channels)
        return interleaved @ _dft_matrix(channels, self.transform, device, dtype)

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': 2.5 N log2 N}`` or ``{'dft_matmul': 2 N (2H + 4W + 2C)}``, ``N = HWC``."""
        height, width = hw_shape
        num_points = height * width * self.embed_dims
        if self.uses_matmul(hw_shape):
            return {'dft_matmul': 2.0 * num_points * (2 * height + 4 * width + 2 * self.embed_dims)}
        return {'fft': fft_flops(num_points, real=True)}
