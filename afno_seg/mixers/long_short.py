"""Long-Short attention token mixer: 2-D sliding-window attention and attention to a dynamic
low-rank projection of all tokens, under one softmax, with separate norms for the two key sets.

References:
    - Zhu, Ping, Xiao, Shoeybi, Goldstein, Anandkumar, Catanzaro, "Long-Short Transformer:
      Efficient Transformers for Language and Vision", NeurIPS 2021. arXiv:2107.02192.
    - Vaswani et al., "Attention Is All You Need", NeurIPS 2017. arXiv:1706.03762.
"""
import math

import torch
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant

__all__ = ['LongShortAttentionMixer']


@register_model
class LongShortAttentionMixer(TokenMixer):
    r"""Transformer-LS attention (Zhu et al. 2021) on an ``H x W`` grid of tokens.

    :math:`Q, K, V = X W_{q,k,v} + b`, heads of :math:`d = C / h` channels; per head:

    * short keys: the grid is cut into ``w x w`` windows (the last ones padded); window
      :math:`(a, b)`'s queries see the keys of rows :math:`[aw - p, aw + w + p)` x columns
      :math:`[bw - p, bw + w + p)`, :math:`p = \lfloor w/2 \rfloor` (out-of-grid ones masked);
    * long keys: :math:`P = \mathrm{softmax}_N(X W_p) \in \mathbb{R}^{N \times r}`,
      :math:`\bar K = P^\top K`, :math:`\bar V = P^\top V`;
    * DualLN: :math:`\tilde K, \tilde V = \mathrm{LN}_S(K), \mathrm{LN}_S(V)`,
      :math:`\hat K, \hat V = \mathrm{LN}_L(\bar K), \mathrm{LN}_L(\bar V)`.

    .. math::
        \mathrm{out}_n = W_o \Big[\mathrm{softmax}\big(q_n [\tilde K_{\mathcal{W}(n)};
        \hat K]^\top / \sqrt{d}\big) [\tilde V_{\mathcal{W}(n)}; \hat V]\Big]_{\text{heads}} + b_o

    one softmax over :math:`(w + 2p)^2 + r` logits, through ``F.scaled_dot_product_attention``
    with a boolean mask. No residual; position from the Mix-FFN.

    Cost (:meth:`flops`), :math:`N_p = w^2 \lceil H/w \rceil \lceil W/w \rceil`: ``qkv``
    :math:`6NC^2`, ``dynamic_projection`` :math:`2NChr`, ``long_range_kv`` :math:`4NrC`,
    ``attention`` :math:`4 N_p ((w + 2p)^2 + r) C`, ``proj`` :math:`2NC^2`.
    Parameters :math:`4C^2 + 4C + Chr + 8d`.

    Args:
        embed_dims (int): Channels C; divisible by ``num_heads``.
        num_heads (int): Attention heads h.
        window_size (int): Window side w. Default: 8.
        num_landmarks (int): Rank r of the dynamic projection. Default: 32.
        qkv_bias (bool): Biases of the q/k/v projection. Default: True.
        attn_drop_rate (float): Dropout on the attention weights. Default: 0.
        proj_drop_rate (float): Dropout after the output projection. Default: 0.
        norm_cfg (dict, optional): The four DualLN norms. Default: None
            (``dict(type='LN', eps=1e-6)``).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """
    # Window and rank chosen for SegFormer-B3's stage grids (the paper's mechanism, not its sizes).
    variants = {'ls': Variant('Long-Short (Transformer-LS)',
                              dict(window_size=8, num_landmarks=32))}
    example_args = dict(num_heads=2, window_size=2, num_landmarks=4)
    extra_examples = {'odd-window': dict(num_heads=2, window_size=3, num_landmarks=3)}
    flop_terms = ('qkv', 'dynamic_projection', 'long_range_kv', 'attention', 'proj')
    # The window grid is sized in Python from H, W: torch.export fixes it at the example's size.
    onnx_dynamic_shape = False

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: int = 8,
                 num_landmarks: int = 32,
                 qkv_bias: bool = True,
                 attn_drop_rate: float = 0.,
                 proj_drop_rate: float = 0.,
                 norm_cfg: dict | None = None,
                 init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.check_heads(embed_dims, num_heads)
        if window_size < 1 or num_landmarks < 1:
            raise ValueError(f'window_size and num_landmarks must be >= 1, got {window_size} '
                             f'and {num_landmarks}')
        self.num_heads, self.head_dims = num_heads, embed_dims // num_heads
        self.window_size, self.num_landmarks = window_size, num_landmarks
        self.attn_drop_rate = attn_drop_rate
        self.qkv = nn.Linear(embed_dims, 3 * embed_dims, bias=qkv_bias)
        self.dynamic_proj = nn.Linear(embed_dims, num_heads * num_landmarks, bias=False)
        norm_cfg = dict(type='LN', eps=1e-6) if norm_cfg is None else norm_cfg
        self.norm_short_key, self.norm_short_value, self.norm_long_key, self.norm_long_value = (
            build_norm_layer(norm_cfg, self.head_dims)[1] for _ in range(4))
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)

    @property
    def region_size(self) -> int:
        """Side ``w + 2 floor(w/2)`` of the key region of one window."""
        return self.window_size + 2 * (self.window_size // 2)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys, values ``(B, heads, N, d)`` of tokens ``(B, N, C)``."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).view(batch, tokens, 3, self.num_heads, self.head_dims)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def long_range_keys_values(self, x: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """``LN_L(P^T K)``, ``LN_L(P^T V)`` ``(B, heads, r, d)``, in at least fp32 with autocast off
        (P's entries are near 1/N, below fp16's normal range; ``BENCHMARKS.md``)."""
        batch, tokens, _ = x.shape
        dtype = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            logits = F.linear(x.to(dtype), self.dynamic_proj.weight.to(dtype))
            # Softmax over the tokens: (B, N, heads, r) -> P^T as (B, heads, r, N).
            weights = logits.view(batch, tokens, self.num_heads, -1).softmax(1).permute(0, 2, 3, 1)
            long_key = self.norm_long_key(weights @ key.to(dtype))
            long_value = self.norm_long_value(weights @ value.to(dtype))
        return long_key, long_value

    def key_mask(self, hw_shape: tuple[int, int], device: torch.device) -> Tensor:
        """``(1, nW, 1, (w + 2p)^2 + r)`` bool, True where a key lies inside the grid (4-D: the
        only mask layout torch's CPU flash kernel takes)."""
        inside = torch.ones(1, *hw_shape, 1, device=device)  # padded with zeros below
        landmarks = inside.new_ones(1, self.num_landmarks, 1)
        return (self.window_keys(inside, landmarks, hw_shape) > 0).transpose(2, 3)

    def window_keys(self, grid: Tensor, landmarks: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Each window's keys ``(M, nW, (w + 2p)^2 + r, d)``: its key region (zero outside the
        grid), then the ``r`` long keys; ``grid (M, H, W, d)``, ``landmarks (M, r, d)``.

        Padded to whole ``w x w`` blocks, window ``(a, b)``'s region is block ``(a, b)``, the
        first ``2p`` columns of ``(a, b + 1)``, the first ``2p`` rows of ``(a + 1, b)`` and the
        ``2p x 2p`` corner of ``(a + 1, b + 1)``: one concatenation of shifted views.
        """
        height, width = hw_shape
        win, halo = self.window_size, self.window_size // 2
        rows, cols = -(-height // win), -(-width // win)
        grid = F.pad(grid, (0, 0, halo, (cols + 1) * win - width - halo,
                            halo, (rows + 1) * win - height - halo))
        # (M, rows + 1, cols + 1, w, w, d): block (a, b) holds padded rows [a w, a w + w), ...
        blocks = grid.view(grid.shape[0], rows + 1, win, cols + 1, win, grid.shape[-1])
        blocks = blocks.permute(0, 1, 3, 2, 4, 5).contiguous()
        # (block offset, rows/columns taken from it) along each axis; no halo block when w = 1.
        extents = [(0, win), (1, 2 * halo)] if halo else [(0, win)]
        pieces = [blocks[:, down:down + rows, right:right + cols, :height_in, :width_in]
                  .flatten(3, 4) for down, height_in in extents for right, width_in in extents]
        pieces.append(landmarks[:, None, None].expand(-1, rows, cols, -1, -1))
        keys = torch.cat(pieces, dim=3)
        return keys.view(grid.shape[0], rows * cols, keys.shape[3], grid.shape[-1])

    def attend(self, query: Tensor, key: Tensor, value: Tensor, long_key: Tensor,
               long_value: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Windowed queries ``(B, heads, N, d)`` against their regions' keys (normed here) and the
        normed long keys ``(B, heads, r, d)``: heads concatenated ``(B, N, C)``."""
        height, width = hw_shape
        batch, heads, tokens, dims = query.shape
        win, dtype = self.window_size, query.dtype
        rows, cols = -(-height // win), -(-width // win)
        folded = batch * heads

        def grid_of(t: Tensor) -> Tensor:
            return t.reshape(folded, height, width, dims)

        queries = F.pad(grid_of(query), (0, 0, 0, cols * win - width, 0, rows * win - height))
        queries = queries.view(folded, rows, win, cols, win, dims).permute(0, 1, 3, 2, 4, 5)
        queries = queries.reshape(folded, rows * cols, win * win, dims)
        keys, values = [
            self.window_keys(grid_of(norm(t).to(dtype)), far.to(dtype).reshape(folded, -1, dims),
                             hw_shape)
            for norm, t, far in [(self.norm_short_key, key, long_key),
                                 (self.norm_short_value, value, long_value)]]
        out = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=self.key_mask(hw_shape, query.device),
            dropout_p=self.attn_drop_rate if self.training else 0.)
        # (B, heads, rows, cols, w, w, d) -> (B, rows, w, cols, w, heads, d), crop the padding.
        out = out.view(batch, heads, rows, cols, win, win, dims).permute(0, 2, 4, 3, 5, 1, 6)
        out = out.reshape(batch, rows * win, cols * win, heads * dims)[:, :height, :width]
        return out.reshape(batch, tokens, heads * dims)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """Long-short attention then the output projection: ``(B, N, C) -> (B, N, C)``."""
        self.check_tokens(x, hw_shape)
        query, key, value = self.project_qkv(x)
        long_key, long_value = self.long_range_keys_values(x, key, value)
        mixed = self.attend(query, key, value, long_key, long_value, hw_shape)
        return self.proj_drop(self.proj(mixed))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """Analytic FLOPs for one image (see the class docstring); biases, norms, softmax not
        counted. The attention term counts the padded grid, as computed."""
        height, width = hw_shape
        tokens, channels, win = height * width, self.embed_dims, self.window_size
        padded = win * win * math.ceil(height / win) * math.ceil(width / win)
        keys_per_query = self.region_size**2 + self.num_landmarks
        return {
            'qkv': 6. * tokens * channels**2,
            'dynamic_projection': 2. * tokens * channels * self.num_heads * self.num_landmarks,
            'long_range_kv': 4. * tokens * self.num_landmarks * channels,
            'attention': 4. * padded * keys_per_query * channels,
            'proj': 2. * tokens * channels**2,
        }
