"""AFF: Adaptive Frequency Filter token mixer (AFFNet's frequency-domain filter).

References:
    Huang, Zhang, Lan, Zha, Lu, Guo. "Adaptive Frequency Filters As Efficient Global Token
    Mixers." ICCV 2023. arXiv:2307.14008. Released code: microsoft/TokenMixers (MIT),
    ``Adaptive Frequency Filters/affnet/modules/aff_block.py``, ``AFNO2D_channelfirst``.
"""
import torch.nn.functional as F
from torch import Tensor

from ..registry import register_model
from .afno import add_block_mlp, block_mlp, split
from .base import TokenMixer, Variant
from .export import aff_matmul, aff_op
from .fast import aff_fast
from .forms import select
from .spectral import irfft2, rfft2, rfft2_flops, run_in_fp32

__all__ = ['AFFMixer']

#: The element-wise activations of the mask MLP's hidden layer, on real and imaginary parts.
ACTIVATIONS = {'relu': F.relu, 'silu': F.silu}


@register_model
class AFFMixer(TokenMixer):
    """Adaptive frequency filter (Huang et al. 2023): AFNO's block MLP makes a mask, not the output.

    With ``Z = rfft2(X)`` and each mode's C channels split into k blocks ``z`` of ``d = C/k``
    (complex), one two-layer MLP per block, shared by all modes (AFNO's, :class:`.AFNOMixer`)::

        h = act(z W1 + b1)             W1: (d, f d) complex, per block; act on re, im apart
        m = S_lambda(h W2 + b2)        W2: (f d, d); soft-shrink on re, im apart
        out = X + irfft2(m * Z)        the mask times the spectrum itself, per mode and channel

    an input-adaptive global filter: GFN's ``irfft2(K * Z)`` with ``K = m(Z)``. ``+ X`` is the
    released module's own residual (kept, as AFNO's). All modes are used, as in the released code
    (its ``hard_thresholding_fraction`` is unused). Spectral work in float32. Forms
    (:mod:`.forms`): ``fast`` one op with a hand-written backward (:func:`.fast.aff_fast`),
    ``op`` and ``matmul`` real arithmetic (:mod:`.export`).

    Numerically the released ``AFNO2D_channelfirst`` (``tests/test_aff.py``), which works on
    ``(B, C, H, W)`` grids; its parameters load unmapped. In the released module the activation
    and lambda come from the global options (``model.activation.name``, default ReLU;
    ``model.activation.sparsity_threshold``, default 0.01) and its constructor's
    ``sparsity_threshold`` is ignored; here both are arguments. Released float64 input is cast to
    float32; here float64 stays float64.

    Shapes: ``(B, H*W, C) -> (B, H*W, C)``, any H, W. Parameters (released layout, index 0 real,
    1 imaginary): ``w1 (2, k, d, f d)``, ``b1 (2, k, f d)``, ``w2 (2, k, f d, d)``,
    ``b2 (2, k, d)``. Cost (:meth:`flops`): ``2 rfft2``, plus per mode of ``H (W//2+1)`` the
    MLP ``2 * 8 C f C / k`` and the mask product ``6 C``.

    Args:
        embed_dims (int): Channels C; divisible by ``num_blocks``.
        num_blocks (int): Blocks k. Default: 8.
        hidden_size_factor (int): f. Default: 1.
        sparsity_threshold (float): lambda >= 0. Default: 0.01.
        act (str): ``'relu'`` or ``'silu'`` (ml-cvnets' ``'swish'``). Default: 'relu'.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'aff': Variant('AFF', dict(num_blocks=8, hidden_size_factor=1,
                                           sparsity_threshold=0.01, act='relu'))}
    example_args = dict(num_blocks=4)
    extra_examples = {'silu-hidden2': dict(num_blocks=2, hidden_size_factor=2, act='silu')}
    flop_terms = ('fft', 'mlp', 'mask')
    forms = {'fast': aff_fast, 'op': aff_op, 'matmul': aff_matmul}

    def __init__(self, embed_dims: int, num_blocks: int = 8, hidden_size_factor: int = 1,
                 sparsity_threshold: float = 0.01, act: str = 'relu',
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        add_block_mlp(self, embed_dims, num_blocks, hidden_size_factor, sparsity_threshold)
        if act not in ACTIVATIONS:
            raise ValueError(f'act must be one of {", ".join(ACTIVATIONS)}, got {act!r}')
        self.act = act

    def weights(self) -> tuple[Tensor, ...]:
        """``(w1, b1, w2, b2)`` in the released layout."""
        return self.w1, self.b1, self.w2, self.b2

    def mask(self, modes: Tensor) -> Tensor:
        """The mask ``m`` of complex channels-first modes ``(B, C, ...)``, the same shape."""
        return block_mlp(modes, self.weights(), ACTIVATIONS[self.act], lambda z: split(
            lambda t: F.softshrink(t, self.sparsity_threshold), z))

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = rfft2(x, hw_shape)
        return x + irfft2(self.mask(spectrum) * spectrum, hw_shape)

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'fft': rfft2 + irfft2, 'mlp': two complex block-diagonal layers per mode,
        'mask': 6 FLOPs per complex product}``."""
        height, width = hw_shape
        modes = height * (width // 2 + 1)
        hidden = self.embed_dims * self.hidden_size_factor
        return {
            'fft': 2 * rfft2_flops(hw_shape, self.embed_dims),
            'mlp': modes * 2 * 8.0 * self.embed_dims * hidden / self.num_blocks,
            'mask': 6.0 * self.embed_dims * modes,
        }
