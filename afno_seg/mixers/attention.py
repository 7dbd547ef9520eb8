"""Multi-head self-attention token mixers: SegFormer's efficient (spatial-reduction) attention and
full self-attention, both through ``F.scaled_dot_product_attention``.

References:
    - Vaswani et al., "Attention Is All You Need", NeurIPS 2017. arXiv:1706.03762.
    - Wang et al., "Pyramid Vision Transformer", ICCV 2021. arXiv:2102.12122 (spatial reduction).
    - Xie et al., "SegFormer: Simple and Efficient Design for Semantic Segmentation with
      Transformers", NeurIPS 2021. arXiv:2105.15203 (efficient self-attention in MiT).
"""
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant

__all__ = ['EfficientSelfAttentionMixer', 'FullSelfAttentionMixer']


@register_model
class EfficientSelfAttentionMixer(TokenMixer):
    r"""SegFormer's efficient self-attention: keys and values from a spatially reduced grid.

    With ratio :math:`s`, :math:`X_r = \mathrm{LN}(\mathrm{Conv}_{s \times s,\ \mathrm{stride}\ s}
    (X))` (:math:`X_r = X` if :math:`s = 1`), :math:`M = \lfloor H/s \rfloor \lfloor W/s \rfloor`
    tokens; :math:`Q = X W_q + b_q`, :math:`K, V = X_r W_{k,v} + b_{k,v}`; per head of
    :math:`d = C / h` channels

    .. math::
        \mathrm{out} = [A_1, \dots, A_h] W_o + b_o, \qquad
        A_i = \mathrm{softmax}(Q_i K_i^\top / \sqrt{d})\, V_i

    through ``F.scaled_dot_product_attention``. No residual (mmseg's module adds one). Parameter
    names are mmseg's ``EfficientMultiheadAttention``'s (MiT checkpoints load):
    ``attn.in_proj_weight (3C, C)`` :math:`= [W_q; W_k; W_v]`, ``attn.in_proj_bias``,
    ``attn.out_proj``, ``sr``, ``norm``.

    Cost (:meth:`flops`), :math:`N = HW`: ``qkv`` :math:`2NC^2 + 4MC^2`, ``reduction``
    :math:`2MC^2s^2` (``s > 1``), ``attention`` :math:`4NMC`, ``proj`` :math:`2NC^2`.

    Args:
        embed_dims (int): Channels C; divisible by ``num_heads``.
        num_heads (int): Attention heads h.
        sr_ratio (int): Reduction s; the grid must be at least ``s x s``. Default: 1.
        qkv_bias (bool): Biases of the projections (False also drops ``out_proj.bias``, as in
            torch). Default: True.
        attn_drop_rate (float): Dropout on the attention weights. Default: 0.
        proj_drop_rate (float): Dropout after the output projection. Default: 0.
        norm_cfg (dict, optional): Norm after the reduction. Default: None
            (``dict(type='LN', eps=1e-6)``, mmseg's MiT).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'esa': Variant('ESA (SegFormer)')}
    example_args = dict(num_heads=2, sr_ratio=2)
    flop_terms = ('qkv', 'attention', 'proj', 'reduction')  # 'reduction' when sr_ratio > 1

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 attn_drop_rate: float = 0.,
                 proj_drop_rate: float = 0.,
                 norm_cfg: dict | None = None,
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.check_heads(embed_dims, num_heads)
        if sr_ratio < 1:
            raise ValueError(f'sr_ratio must be >= 1, got {sr_ratio}')
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        self.attn_drop_rate = attn_drop_rate
        # Parameter container only (mmseg's key names); its forward is never called.
        self.attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=attn_drop_rate,
                                          bias=qkv_bias, batch_first=True)
        self.proj_drop = nn.Dropout(proj_drop_rate)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, kernel_size=sr_ratio, stride=sr_ratio)
            norm_cfg = dict(type='LN', eps=1e-6) if norm_cfg is None else norm_cfg
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def reduce(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Key/value tokens ``(B, M, C)`` for ``s > 1``: strided conv then norm."""
        height, width = hw_shape
        if height < self.sr_ratio or width < self.sr_ratio:
            raise ValueError(f'grid {tuple(hw_shape)} is smaller than sr_ratio {self.sr_ratio}')
        grid = x.transpose(1, 2).reshape(x.shape[0], self.embed_dims, height, width)
        return self.norm(self.sr(grid).flatten(2).transpose(1, 2))

    def _split_heads(self, t: Tensor) -> Tensor:
        """``(B, L, C) -> (B, heads, L, d)``."""
        batch, length, _ = t.shape
        return t.view(batch, length, self.num_heads, -1).transpose(1, 2)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Attend every token to the (reduced) grid: ``(B, N, C) -> (B, N, C)``, no residual."""
        self.check_tokens(x, hw_shape)
        channels = self.embed_dims
        weight, bias = self.attn.in_proj_weight, self.attn.in_proj_bias
        if self.sr_ratio == 1:
            # Self-attention: one GEMM produces q, k and v together.
            query, key, value = F.linear(x, weight, bias).chunk(3, dim=-1)
        else:
            query = F.linear(x, weight[:channels], None if bias is None else bias[:channels])
            key, value = F.linear(self.reduce(x, hw_shape), weight[channels:],
                                  None if bias is None else bias[channels:]).chunk(2, dim=-1)
        out = F.scaled_dot_product_attention(
            self._split_heads(query), self._split_heads(key), self._split_heads(value),
            dropout_p=self.attn_drop_rate if self.training else 0.)
        out = out.transpose(1, 2).reshape(x.shape)
        return self.proj_drop(self.attn.out_proj(out))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """Analytic FLOPs for one image (see the class docstring); biases and norms not counted."""
        height, width = hw_shape
        tokens, channels, ratio = height * width, self.embed_dims, self.sr_ratio
        reduced = (height // ratio) * (width // ratio)
        counts = {
            'qkv': 2. * tokens * channels**2 + 4. * reduced * channels**2,
            'attention': 4. * tokens * reduced * channels,
            'proj': 2. * tokens * channels**2,
        }
        if ratio > 1:
            counts['reduction'] = 2. * reduced * channels**2 * ratio**2
        return counts


@register_model
class FullSelfAttentionMixer(EfficientSelfAttentionMixer):
    r"""Full multi-head self-attention (Vaswani et al. 2017) over all ``N = HW`` tokens.

    :class:`EfficientSelfAttentionMixer` with ``s = 1`` (same parameter names). Its constructor
    has no ``sr_ratio``, so the backbone passes none. Memory stays linear in N where
    ``F.scaled_dot_product_attention`` has a fused kernel.

    Cost (:meth:`flops`): ``qkv`` :math:`6NC^2`, ``attention`` :math:`4N^2C`, ``proj``
    :math:`2NC^2`.

    Args:
        embed_dims (int): Channels C; divisible by ``num_heads``.
        num_heads (int): Attention heads.
        qkv_bias (bool): Biases of the projections. Default: True.
        attn_drop_rate (float): Dropout on the attention weights. Default: 0.
        proj_drop_rate (float): Dropout after the output projection. Default: 0.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'sa': Variant('full self-attention')}
    example_args = dict(num_heads=2)
    flop_terms = ('qkv', 'attention', 'proj')

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop_rate: float = 0.,
                 proj_drop_rate: float = 0.,
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, num_heads, sr_ratio=1, qkv_bias=qkv_bias,
                         attn_drop_rate=attn_drop_rate, proj_drop_rate=proj_drop_rate,
                         init_cfg=init_cfg)
