"""AFNO: Adaptive Fourier Neural Operator token mixer.

References:
    Guibas, Mardani, Li, Tao, Anandkumar, Catanzaro. "Adaptive Fourier Neural Operators: Efficient
    Token Mixers for Transformers." ICLR 2022. arXiv:2111.13587.
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant
from .export import afno_matmul, afno_op
from .fast import afno_fast
from .forms import select
from .spectral import SpectralBand, irfft2, rfft2, rfft2_flops, run_in_fp32

__all__ = ['AFNOMixer', 'add_block_mlp', 'block_mlp']

SHRINK_MODES = ('split', 'magnitude')


def split(fn, z: Tensor) -> Tensor:
    """``fn`` applied to the real and the imaginary parts of complex ``z`` separately."""
    return torch.view_as_complex(fn(torch.view_as_real(z)).contiguous())


def block_mlp(modes: Tensor, weights, activation, shrink) -> Tensor:
    """``shrink(act(z W1 + b1) W2 + b2)`` per block ``z`` of complex channels-first modes
    ``(B, C, ...)``, ``act`` on re and im apart; ``weights`` ``(w1, b1, w2, b2)`` in the released
    layout (``w1 (2, k, d, f d)``): AFNO's output, AFF's mask."""
    batch, channels, *grid = modes.shape
    w1, b1, w2, b2 = (torch.complex(*p.to(modes.real.dtype)) for p in weights)
    z = modes.reshape(batch, w1.shape[0], w1.shape[1], -1).mT  # (B, k, M, d)
    hidden = split(activation, z @ w1 + b1.unsqueeze(1))
    return shrink(hidden @ w2 + b2.unsqueeze(1)).mT.reshape(batch, channels, *grid)


def add_block_mlp(mixer: nn.Module, embed_dims: int, num_blocks: int, hidden_size_factor: int,
                  sparsity_threshold: float) -> None:
    """Check the block MLP's arguments and give ``mixer`` its ``num_blocks``, ``block_size``,
    ``hidden_size_factor``, ``sparsity_threshold`` and parameters ``w1, b1, w2, b2`` in the
    released layout (:func:`block_mlp`): AFNO's and AFF's."""
    if num_blocks < 1 or embed_dims % num_blocks:
        raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_blocks '
                         f'({num_blocks})')
    if hidden_size_factor < 1:
        raise ValueError(f'hidden_size_factor must be >= 1, got {hidden_size_factor}')
    if not sparsity_threshold >= 0:
        raise ValueError(f'sparsity_threshold must be >= 0, got {sparsity_threshold}')
    block = embed_dims // num_blocks
    hidden = block * hidden_size_factor
    mixer.num_blocks, mixer.block_size = num_blocks, block
    mixer.hidden_size_factor = hidden_size_factor
    mixer.sparsity_threshold = float(sparsity_threshold)
    for name, shape in (('w1', (block, hidden)), ('b1', (hidden, )), ('w2', (hidden, block)),
                        ('b2', (block, ))):  # this order: the random draws of a seed
        mixer.register_parameter(name, nn.Parameter(0.02 * torch.randn(2, num_blocks, *shape)))


@register_model
class AFNOMixer(TokenMixer):
    """Adaptive Fourier Neural Operator mixer (Guibas et al. 2021).

    With ``Z = rfft2(X)`` and each kept mode's C channels split into k blocks ``z`` of ``d = C/k``
    (complex), one two-layer MLP per block, shared by all modes::

        o1 = ReLU(z W1 + b1)           W1: (d, f d) complex, per block; ReLU on re, im
        o2 = S_lambda(o1 W2 + b2)      W2: (f d, d); soft-shrink on re, im ('split') or on |.|
        out = X + irfft2(o2 on the kept modes, 0 elsewhere)

    Kept modes: ``hard_thresholding_fraction`` f_h of the frequencies along both axes
    (:meth:`SpectralBand.fraction`); the MLP runs only on those. ``+ X`` is the paper's own
    residual. Not shift-equivariant (biases, split ReLU). Spectral work in float32. Forms
    (:mod:`.forms`): ``fast`` one autograd function with a hand-written backward
    (:func:`.fast.afno_fast`), ``op`` and ``matmul`` real arithmetic (:mod:`.export`).

    Shapes: ``(B, H*W, C) -> (B, H*W, C)``, any H, W. Parameters (released layout, index 0 real,
    1 imaginary): ``w1 (2, k, d, f d)``, ``b1 (2, k, f d)``, ``w2 (2, k, f d, d)``,
    ``b2 (2, k, d)``: ``4 f C^2 / k + 2 (f + 1) C`` reals. Cost (:meth:`flops`): ``2 rfft2``
    plus ``2 * 8 C f C / k`` per kept mode.

    Args:
        embed_dims (int): Channels C; divisible by ``num_blocks``.
        num_blocks (int): Blocks k. Default: 8.
        hidden_size_factor (int): f. Default: 1.
        sparsity_threshold (float): lambda >= 0. Default: 0.01.
        hard_thresholding_fraction (float): f_h in (0, 1]. Default: 1.0.
        shrink (str): ``'split'`` or ``'magnitude'`` (keeps the phase). Default: 'split'.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {
        'afno': Variant('AFNO-100%', dict(num_blocks=8, hidden_size_factor=1,
                                          sparsity_threshold=0.01,
                                          hard_thresholding_fraction=1.0)),
        'afno25': Variant('AFNO-25%', dict(num_blocks=8, hidden_size_factor=1,
                                           sparsity_threshold=0.01,
                                           hard_thresholding_fraction=0.25)),
    }
    example_args = dict(num_blocks=4)
    extra_examples = {
        'truncated-magnitude': dict(num_blocks=4, hard_thresholding_fraction=0.5,
                                    shrink='magnitude', hidden_size_factor=2),
        'quarter-hidden2': dict(num_blocks=2, hidden_size_factor=2,
                                hard_thresholding_fraction=0.25),
    }
    flop_terms = ('fft', 'mlp')
    forms = {'fast': afno_fast, 'op': afno_op, 'matmul': afno_matmul}

    def __init__(self, embed_dims: int, num_blocks: int = 8, hidden_size_factor: int = 1,
                 sparsity_threshold: float = 0.01, hard_thresholding_fraction: float = 1.0,
                 shrink: str = 'split', init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        add_block_mlp(self, embed_dims, num_blocks, hidden_size_factor, sparsity_threshold)
        if not 0.0 < hard_thresholding_fraction <= 1.0:
            raise ValueError('hard_thresholding_fraction must be in (0, 1], got '
                             f'{hard_thresholding_fraction}')
        if shrink not in SHRINK_MODES:
            raise ValueError(f'shrink must be one of {SHRINK_MODES}, got {shrink!r}')
        self.hard_thresholding_fraction = float(hard_thresholding_fraction)
        # The band is sized from this text, a constant to torch.compile: a float attribute that
        # differs between two compiled AFNO modules becomes a symbolic float, and inductor then
        # fails on the band's ceil() ("AssertionError: Source of ...", torch 2.14).
        self._fraction_text = repr(self.hard_thresholding_fraction)
        self.shrink = shrink

    def mode_mlp(self, modes: Tensor) -> Tensor:
        """The block MLP and shrink on complex channels-first modes ``(B, C, ...)``."""
        return block_mlp(modes, self.weights(), F.relu, self.soft_shrink)

    def soft_shrink(self, z: Tensor) -> Tensor:
        """``S_lambda``: on re and im ('split'), or ``max(|z| - lambda, 0) z / |z|``."""
        if self.shrink == 'split':
            return split(lambda t: F.softshrink(t, self.sparsity_threshold), z)
        magnitude = z.abs()
        gain = F.relu(magnitude - self.sparsity_threshold) / magnitude.clamp_min(1e-30)
        # On the real view: element-wise work, which the FLOP count leaves out.
        return torch.view_as_complex(torch.view_as_real(z) * gain.unsqueeze(-1))

    def band(self, hw_shape: tuple[int, int]) -> SpectralBand:
        """The modes kept on an ``H x W`` grid."""
        return SpectralBand.fraction(tuple(hw_shape), float(self._fraction_text))

    def weights(self) -> tuple[Tensor, ...]:
        """``(w1, b1, w2, b2)`` in the released layout."""
        return self.w1, self.b1, self.w2, self.b2

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int], fast: bool = False) -> Tensor:
        band = self.band(hw_shape)
        return x + irfft2(self.mode_mlp(rfft2(x, hw_shape, band, fast)), hw_shape, band, fast)

    @property
    def onnx_dynamic_shape(self) -> bool:
        """Only without truncation: torch.export cannot keep the band's ceil() symbolic."""
        return self.hard_thresholding_fraction == 1.0

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'mlp': two complex block-diagonal layers on kept modes}``."""
        band = self.band(hw_shape)
        hidden = self.embed_dims * self.hidden_size_factor
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'mlp': band.num_modes * 2 * 8.0 * self.embed_dims * hidden / self.num_blocks,
        }
