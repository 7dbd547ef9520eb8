"""Axial attention token mixer: multi-head attention along the grid's height, then its width.

References:
    - Ho et al., "Axial Attention in Multidimensional Transformers", 2019. arXiv:1912.12180.
    - Wang et al., "Axial-DeepLab: Stand-Alone Axial-Attention for Panoptic Segmentation",
      ECCV 2020. arXiv:2003.07853 (height then width passes inside one block).
    - Vaswani et al., "Attention Is All You Need", NeurIPS 2017. arXiv:1706.03762.
"""
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant

__all__ = ['AxialAttentionMixer']


@register_model
class AxialAttentionMixer(TokenMixer):
    r"""Multi-head attention along H (W folded into the batch), then along W (H folded in).

    With tokens :math:`x_{ij}` and heads of :math:`d = C / h` channels, each pass with its own
    q/k/v projection:

    .. math::
        u_{ij} &= \Big[\sum_{i'} \mathrm{softmax}_{i'}\big(q^H_{ij} \cdot k^H_{i'j}/\sqrt{d}\big)
                  \, v^H_{i'j}\Big]_{\text{heads}} \quad (q^H, k^H, v^H \text{ from } x), \\
        y_{ij} &= W_o \Big[\sum_{j'} \mathrm{softmax}_{j'}\big(q^W_{ij} \cdot k^W_{ij'}/\sqrt{d}
                  \big)\, v^W_{ij'}\Big]_{\text{heads}} + b_o \quad (q^W, k^W, v^W
                  \text{ from } u).

    A global receptive field in one mixer; no projection between the passes (the width pass's
    q/k/v would absorb it, as in Axial-DeepLab); no residual; position from the Mix-FFN.

    Cost (:meth:`flops`), :math:`N = HW`: ``qkv`` :math:`12NC^2`, ``attention``
    :math:`4NC(H + W)`, ``proj`` :math:`2NC^2`. Parameters :math:`7C^2 + 7C`.

    Args:
        embed_dims (int): Channels C; divisible by ``num_heads``.
        num_heads (int): Attention heads h (both passes).
        qkv_bias (bool): Biases of the q/k/v projections. Default: True.
        attn_drop_rate (float): Dropout on the attention weights. Default: 0.
        proj_drop_rate (float): Dropout after the output projection. Default: 0.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'axial': Variant('axial attention')}
    example_args = dict(num_heads=2)
    flop_terms = ('qkv', 'attention', 'proj')

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop_rate: float = 0.,
                 proj_drop_rate: float = 0.,
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.check_heads(embed_dims, num_heads)
        self.num_heads = num_heads
        self.attn_drop_rate = attn_drop_rate
        self.qkv_height = nn.Linear(embed_dims, 3 * embed_dims, bias=qkv_bias)
        self.qkv_width = nn.Linear(embed_dims, 3 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)

    def attend(self, x: Tensor, hw_shape: tuple[int, int], axis: int) -> Tensor:
        """One pass: attention along grid axis ``axis`` (1: H, each column within itself; 2: W,
        each row) of ``(B, N, C)`` tokens, heads concatenated ``(B, N, C)``, no projection."""
        height, width = self.check_tokens(x, hw_shape)
        batch, _, channels = x.shape
        heads = self.num_heads
        qkv = self.qkv_height if axis == 1 else self.qkv_width
        # (B, H, W, 3, heads, d): index 3 selects q, k or v.
        qkv_grid = qkv(x).view(batch, height, width, 3, heads, channels // heads)
        # Put the attended axis next to the head dim and fold the other grid axis into the batch.
        other = 3 - axis
        qkv_grid = qkv_grid.permute(3, 0, other, 4, axis, 5)
        length, folded = qkv_grid.shape[4], batch * qkv_grid.shape[2]
        query, key, value = qkv_grid.reshape(3, folded, heads, length, channels // heads)
        out = F.scaled_dot_product_attention(
            query, key, value, dropout_p=self.attn_drop_rate if self.training else 0.)
        # (B, other, heads, length, d) -> (B, H, W, heads, d) -> (B, N, C).
        out = out.reshape(batch, -1, heads, length, channels // heads)
        out = out.permute(0, 3, 1, 2, 4) if axis == 1 else out.permute(0, 1, 3, 2, 4)
        return out.reshape(batch, height * width, channels)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Height pass, width pass, output projection: ``(B, N, C) -> (B, N, C)``, no residual."""
        mixed = self.attend(self.attend(x, hw_shape, axis=1), hw_shape, axis=2)
        return self.proj_drop(self.proj(mixed))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """Analytic FLOPs for one image (see the class docstring); biases not counted."""
        height, width = hw_shape
        tokens, channels = height * width, self.embed_dims
        return {
            'qkv': 2. * 2. * tokens * channels * 3 * channels,
            'attention': 4. * tokens * channels * (height + width),
            'proj': 2. * tokens * channels**2,
        }
