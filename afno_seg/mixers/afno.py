"""AFNO: Adaptive Fourier Neural Operator token mixer.

References:
    Guibas, Mardani, Li, Tao, Anandkumar, Catanzaro. "Adaptive Fourier Neural Operators: Efficient
    Token Mixers for Transformers." ICLR 2022. arXiv:2111.13587.
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import register_model
from .afno_fused import FusedAFNO, block_matrix, complex_bias
from .base import TokenMixer, Variant
from .spectral import (
    SpectralBand,
    grid_to_tokens,
    rfft2_flops,
    run_in_fp32,
    spectrum_to_grid,
    tokens_to_grid,
    tokens_to_spectrum,
)

__all__ = ['AFNOMixer']

SHRINK_MODES = ('split', 'magnitude')


@register_model
class AFNOMixer(TokenMixer):
    """Adaptive Fourier Neural Operator mixer (Guibas et al. 2021).

    With ``Z = rfft2(X)`` (orthonormal, over the grid) and each kept frequency's channels split
    into ``k`` blocks of ``d = C / k``, every block ``z`` (complex, length ``d``) goes through a
    two-layer complex MLP shared by all frequencies, then a soft-shrink ``S_lambda``::

        o1 = ReLU(z W1 + b1)                   W1: d x f*d, complex, per block
        o2 = S_lambda(o1 W2 + b2)              W2: f*d x d
        out = X + irfft2(o2 at kept modes, 0 elsewhere)

    * ReLU and ``shrink='split'`` act on the real and imaginary parts separately, as the paper's
      listing; ``shrink='magnitude'`` is the proximal operator of the complex L1 norm,
      ``z -> max(|z| - lambda, 0) * z / |z|``, which keeps the phase.
    * ``+ X`` is AFNO's internal residual (the ``+ bias`` of the paper's listing); it is kept here
      on top of the encoder layer's own residual, as in the paper.
    * NOT shift-equivariant: a circular shift of the grid multiplies each mode by a phase
      ``exp(i theta)``, which commutes with the complex matmuls but not with the biases nor with
      ReLU / soft-shrink on real and imaginary parts. (GFN and FNO are equivariant.)
    * Hard truncation (``hard_thresholding_fraction`` = fraction kept): the lowest fraction of
      frequencies along BOTH axes (:meth:`SpectralBand.fraction`); the other modes are zeroed and
      the MLP runs only on the kept ones. AFNO-25% keeps about 1/16 of the modes.
    * Each complex block-diagonal layer is ONE batched complex GEMM (plus the bias;
      4 real multiply-adds per complex one, as the real block form ``[[Wr, Wi], [-Wi, Wr]]``
      would take) on channels-first modes, the layout torch's FFTs work in, so no copy sits
      between the FFTs and the GEMMs. The default (``fused``) path is one autograd function
      with a hand-written backward (:class:`~.afno_fused.FusedAFNO`): grid ``(C, B, H, W)``
      so that a block's modes of the whole batch are one matrix, no conjugated GEMM operands,
      no spectrum-sized temporaries beyond the GEMM outputs. Its time against the composed
      path and against its floor (a bare FFT round trip plus one matmul of the same
      multiply-adds) is measured in ``BENCHMARKS.md``.
    * Numerics: spectral work in float32 with autocast off, result cast back to the input dtype.

    Shapes: ``x (B, H*W, C) -> (B, H*W, C)``; any ``H, W``. Parameters (the released layout, so
    such weights load unchanged; index 0 real, 1 imaginary; init ``0.02 * randn``):
    ``w1 (2, k, d, f d)``, ``b1 (2, k, f d)``, ``w2 (2, k, f d, d)``, ``b2 (2, k, d)``;
    ``4 f C^2 / k + 2 (f + 1) C`` reals.

    Cost per image (:meth:`flops`): ``rfft2 + irfft2 = 2 * 2.5 C HW log2(HW)`` plus, per kept mode,
    ``2 * 8 C (f C / k)`` for the two complex layers.

    Args:
        embed_dims (int): Channels C; divisible by ``num_blocks``.
        num_blocks (int): Blocks k of the block-diagonal weights. Default: 8.
        hidden_size_factor (int): Hidden width factor f of the MLP. Default: 1.
        sparsity_threshold (float): Soft-shrink threshold lambda >= 0. Default: 0.01.
        hard_thresholding_fraction (float): Fraction of frequencies kept along each axis, in
            (0, 1]. Default: 1.0.
        shrink (str): ``'split'`` (real and imaginary parts) or ``'magnitude'`` (phase-keeping).
            Default: ``'split'``.
        fused (bool): With ``shrink='split'``, run the mixer as one autograd function with a
            hand-written backward (:class:`~.afno_fused.FusedAFNO`); ``False`` composes it from
            torch ops (the reference it is tested against; also what ``'magnitude'`` uses).
            Default: True.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {
        'afno': Variant('AFNO-100%', dict(num_blocks=8, hidden_size_factor=1,
                                          sparsity_threshold=0.01,
                                          hard_thresholding_fraction=1.0)),
        'afno25': Variant('AFNO-25%', dict(num_blocks=8, hidden_size_factor=1,
                                           sparsity_threshold=0.01,
                                           hard_thresholding_fraction=0.25)),
        'afno-composed': Variant('AFNO-100% (composed reference)',
                                 dict(num_blocks=8, fused=False), listed=False),
    }
    example_args = dict(num_blocks=4)
    extra_examples = {
        'truncated-magnitude': dict(num_blocks=4, hard_thresholding_fraction=0.5,
                                    shrink='magnitude', hidden_size_factor=2),
        'quarter-hidden2': dict(num_blocks=2, hidden_size_factor=2,
                                hard_thresholding_fraction=0.25),
    }
    spectral = True
    flop_terms = ('fft', 'mlp')

    def __init__(self, embed_dims: int, num_blocks: int = 8, hidden_size_factor: int = 1,
                 sparsity_threshold: float = 0.01, hard_thresholding_fraction: float = 1.0,
                 shrink: str = 'split', fused: bool = True, init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        if num_blocks < 1 or embed_dims % num_blocks:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_blocks '
                             f'({num_blocks})')
        if not 0.0 < hard_thresholding_fraction <= 1.0:
            raise ValueError('hard_thresholding_fraction must be in (0, 1], got '
                             f'{hard_thresholding_fraction}')
        if shrink not in SHRINK_MODES:
            raise ValueError(f'shrink must be one of {SHRINK_MODES}, got {shrink!r}')
        if hidden_size_factor < 1 or sparsity_threshold < 0:
            raise ValueError('hidden_size_factor must be >= 1 and sparsity_threshold >= 0, got '
                             f'{hidden_size_factor} and {sparsity_threshold}')
        self.num_blocks = num_blocks
        self.block_size = embed_dims // num_blocks
        self.hidden_size_factor = hidden_size_factor
        self.sparsity_threshold = float(sparsity_threshold)
        self.hard_thresholding_fraction = float(hard_thresholding_fraction)
        self.shrink = shrink
        self.fused = bool(fused)
        hidden = self.block_size * hidden_size_factor
        scale = 0.02
        self.w1 = nn.Parameter(scale * torch.randn(2, num_blocks, self.block_size, hidden))
        self.b1 = nn.Parameter(scale * torch.randn(2, num_blocks, hidden))
        self.w2 = nn.Parameter(scale * torch.randn(2, num_blocks, hidden, self.block_size))
        self.b2 = nn.Parameter(scale * torch.randn(2, num_blocks, self.block_size))

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(self._forward_fp32, x, tuple(hw_shape))

    def _forward_fp32(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        band = SpectralBand.fraction(hw_shape, self.hard_thresholding_fraction)
        if self.fused and self.shrink == 'split':
            weights = [p.to(x.dtype) for p in (self.w1, self.b1, self.w2, self.b2)]
            keep = torch.is_grad_enabled() and any(t.requires_grad for t in [x, *weights])
            return FusedAFNO.apply(x, *weights, hw_shape, band, self.sparsity_threshold, keep)
        modes = self.mode_mlp(band.gather(tokens_to_spectrum(x, hw_shape)))
        # Composed from differentiable ops (the reference of the fused path).
        return grid_to_tokens(tokens_to_grid(x, hw_shape) + spectrum_to_grid(band.scatter(modes),
                                                                             hw_shape))

    def mode_mlp(self, modes: Tensor) -> Tensor:
        """The block-diagonal complex MLP and shrink on channels-first modes ``(B, C, ...)``.

        ``modes`` is complex with the float dtype of the island (complex64 or complex128).
        """
        batch, channels, *grid = modes.shape
        blocks = self.num_blocks
        tokens = modes.reshape(batch * blocks, self.block_size, -1)  # (B k, d, modes)
        hidden = self._complex_layer(tokens, self.w1, self.b1, batch)
        torch.view_as_real(hidden).relu_()  # split ReLU, in place on the GEMM output
        out = self._complex_layer(hidden, self.w2, self.b2, batch)
        return self._shrink(out).reshape(batch, channels, *grid)

    @staticmethod
    def _complex_layer(tokens: Tensor, weight: Tensor, bias: Tensor, batch: int) -> Tensor:
        """``z W + b`` per block, as ONE complex GEMM: ``(B k, d_in, M) -> (B k, d_out, M)``."""
        dtype = tokens.real.dtype
        return _block_affine(block_matrix(weight, dtype), bias.to(dtype), tokens, batch)

    def _shrink(self, out: Tensor) -> Tensor:
        """Soft-shrink complex ``out`` by ``sparsity_threshold`` (split or magnitude)."""
        if self.shrink == 'split':
            return torch.view_as_complex(F.softshrink(torch.view_as_real(out),
                                                      self.sparsity_threshold))
        magnitude = out.abs()
        # max(|z| - lambda, 0) / |z|; the clamp only guards 0/0 at z == 0 (then the factor is 0).
        gain = F.relu(magnitude - self.sparsity_threshold) / magnitude.clamp_min(1e-30)
        # On the real view: the shrink is element-wise work, uncounted like the split one, while
        # a complex x real product would be counted as spectral arithmetic by the FLOP tracer.
        return torch.view_as_complex(torch.view_as_real(out) * gain.unsqueeze(-1))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'mlp': two complex block-diagonal layers on kept modes}``."""
        band = SpectralBand.fraction(tuple(hw_shape), self.hard_thresholding_fraction)
        hidden = self.embed_dims * self.hidden_size_factor
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'mlp': band.num_modes * 2 * 8.0 * self.embed_dims * hidden / self.num_blocks,
        }


def _per_sample(tensor: Tensor, batch: int) -> Tensor:
    """Repeat a per-block ``(k, ...)`` tensor over the batch -> ``(B k, ...)`` (tiny copies)."""
    return tensor.expand(batch, *tensor.shape).reshape(-1, *tensor.shape[1:])


def _block_affine(matrix: Tensor, bias: Tensor, tokens: Tensor, batch: int) -> Tensor:
    """``matrix @ tokens + bias`` per block: one batched complex GEMM with the bias fused."""
    return torch.baddbmm(_per_sample(complex_bias(bias), batch), _per_sample(matrix, batch),
                         tokens)
