"""MSCA: SegNeXt's multi-scale convolutional attention, mmseg's own module on the token grid.

References:
    Guo, Lu, Hou, Liu, Cheng, Hu. "SegNeXt: Rethinking Convolutional Attention Design for
    Semantic Segmentation." NeurIPS 2022. arXiv:2209.08575.
    mmsegmentation 1.x, ``mmseg/models/backbones/mscan.py`` (``MSCASpatialAttention``).
"""
import math

import torch
from mmengine.utils import to_2tuple
from mmseg.models.backbones.mscan import MSCASpatialAttention
from torch import Tensor

from ..registry import register_model
from .base import TokenMixer, Variant
from .fast.msca import msca_fast
from .forms import select

__all__ = ['MSCAMixer']


@register_model
class MSCAMixer(TokenMixer):
    r"""SegNeXt's MSCA (Guo et al. 2022): mmseg's ``MSCASpatialAttention`` on the token grid.

    With :math:`a = \mathrm{act}(W_1 X + b_1)` (1x1 convolution ``proj_1``), the depth-wise
    5x5 convolution :math:`D_0` and three branches of depth-wise strips
    :math:`S_i = D_{k_i \times 1} D_{1 \times k_i}` (:math:`k = 7, 11, 21`):

    .. math::
        s = D_0 a, \qquad A = W_3 \Big(s + \sum_{i=0}^{2} S_i\, s\Big) + b_3, \qquad
        \mathrm{out} = W_2 (A \odot a) + b_2 + X

    (``spatial_gating_unit.conv3``, ``proj_2``), zero padding ``k // 2`` so any grid keeps its
    size, smaller than the kernels included. The submodules ARE mmseg's, under their own names
    (its state dict loads unmapped); mmseg's forward on them is the formula, the ``fast`` form
    (:mod:`.fast.msca`) the same arithmetic on the tokens with a cheaper backward. The internal
    residual ``+ X`` is kept; the encoder layer's LayerNorm stands for SegNeXt's BatchNorm and
    layer scale.

    Shapes: ``(B, H*W, C) -> (B, H*W, C)`` through a ``(B, C, H, W)`` view of the tokens.
    Cost (:meth:`flops`), :math:`N = HW`: ``depthwise`` :math:`2 T C N` with :math:`T` the
    taps of all depth-wise kernels (25 + 2 (7 + 11 + 21) = 103 by default), ``pointwise``
    :math:`6 C^2 N` (three 1x1 convolutions); biases, the gate product and the residual are
    element-wise, not counted.

    Args:
        embed_dims (int): Channels C.
        attention_kernel_sizes (sequence): The square kernel, then the three ``(1, k)`` strips
            (each also run as ``(k, 1)``); odd sizes. Default: (5, (1, 7), (1, 11), (1, 21)).
        attention_kernel_paddings (sequence): Their paddings, half of each size rounded down.
            Default: (2, (0, 3), (0, 5), (0, 10)).
        act_cfg (dict): Activation after ``proj_1``. Default: dict(type='GELU').
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'msca': Variant('MSCA (SegNeXt)')}
    # Strips wider than the suites' small grids (default kernels), and a second setting.
    extra_examples = {'small-kernels-relu': dict(
        attention_kernel_sizes=(3, (1, 5), (1, 7), (1, 9)),
        attention_kernel_paddings=(1, (0, 2), (0, 3), (0, 4)), act_cfg=dict(type='ReLU'))}
    flop_terms = ('depthwise', 'pointwise')
    forms = {'fast': msca_fast}

    def __init__(self,
                 embed_dims: int,
                 attention_kernel_sizes=(5, (1, 7), (1, 11), (1, 21)),
                 attention_kernel_paddings=(2, (0, 3), (0, 5), (0, 10)),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        sizes, paddings = list(attention_kernel_sizes), list(attention_kernel_paddings)
        if len(sizes) != 4 or len(paddings) != 4:
            raise ValueError('attention_kernel_sizes and attention_kernel_paddings need 4 entries '
                             f'each (a square kernel, 3 strips), got {sizes} and {paddings}')
        for index, (size, padding) in enumerate(zip(sizes, paddings)):
            pairs = zip(to_2tuple(size), to_2tuple(padding))
            if any(k % 2 == 0 or 2 * p != k - 1 for k, p in pairs):
                raise ValueError(f'attention_kernel_paddings[{index}] must be half of odd '
                                 f'attention_kernel_sizes[{index}] (the grid keeps its size), '
                                 f'got size {size} and padding {padding}')
        self.kernel_taps = math.prod(to_2tuple(sizes[0])) + 2 * sum(
            math.prod(to_2tuple(size)) for size in sizes[1:])
        attention = MSCASpatialAttention(embed_dims, sizes, paddings, act_cfg)
        for name, module in attention.named_children():
            self.add_module(name, module)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return select(self)(x, tuple(hw_shape))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        # A channels-last view, as MSCAN's own block hands the module; compiled, a copy: inductor
        # (torch 2.14) failed on the view once shapes turned dynamic (e.g. the next stage).
        grid = x.unflatten(1, hw_shape).permute(0, 3, 1, 2)
        if torch.compiler.is_compiling():
            grid = grid.contiguous()
        return MSCASpatialAttention.forward(self, grid).flatten(2).transpose(1, 2)  # mmseg's

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        tokens, channels = hw_shape[0] * hw_shape[1], self.embed_dims
        return {'depthwise': 2.0 * self.kernel_taps * channels * tokens,
                'pointwise': 6.0 * channels ** 2 * tokens}
