"""Pooling: PoolFormer's parameter-free token mixer, a local average minus the token itself.

References:
    Yu, Luo, Zhou, Si, Zhou, Wang, Feng, Yan. "MetaFormer Is Actually What You Need for Vision."
    CVPR 2022. arXiv:2111.11418 (released code: sail-sg/poolformer, ``Pooling``).
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..registry import register_model
from .base import TokenMixer, Variant

__all__ = ['PoolingMixer']


@register_model
class PoolingMixer(TokenMixer):
    r"""PoolFormer's pooling (Yu et al. 2022): ``out = AvgPool_k(X) - X``, no parameters.

    For token :math:`(i, j)` and its :math:`k \times k` window :math:`\Omega_{ij}` clipped to
    the grid (stride 1, padding :math:`k // 2`),

    .. math::
        \mathrm{out}_{ij} = \frac{1}{|\Omega_{ij}|} \sum_{(u, v) \in \Omega_{ij}} X_{uv} - X_{ij},

    the average over valid tokens only (``count_include_pad=False``, as released: a border
    token is not pulled towards zero). The ``- X`` is the released module's: the encoder
    layer's residual adds ``X`` back, so the layer adds the local average alone. Any grid,
    smaller than the window included.

    Shapes: ``(B, H*W, C) -> (B, H*W, C)`` through a channels-last ``(B, C, H, W)`` view.
    Cost (:meth:`flops`): ``pool`` :math:`k^2 C H W`: per output, ``k^2 - 1`` additions and one
    division (the window counted whole at the border, as convolutions are); the ``- X`` is
    element-wise, not counted.

    Args:
        embed_dims (int): Channels C (no parameters depend on it).
        pool_size (int): Odd window size k. Default: 3 (the released one).
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'pool': Variant('pooling (PoolFormer)', dict(pool_size=3))}
    example_args = dict(pool_size=3)
    # A window wider than the suites' small grids (7 x 5, 4 x 6).
    extra_examples = {'pool-9': dict(pool_size=9)}
    flop_terms = ('pool', )

    def __init__(self, embed_dims: int, pool_size: int = 3, init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1 \
                or pool_size % 2 == 0:
            raise ValueError(f'pool_size must be an odd positive integer (a window centred on '
                             f'each token), got {pool_size!r}')
        self.pool_size = pool_size

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        height, width = self.check_tokens(x, hw_shape)
        if torch.compiler.is_compiling():
            return self.window_sums(x, (height, width))
        # A channels-last view (permute keeps every stride, batch 1 included: CPU kernels
        # then take their channels-last paths).
        grid = x.unflatten(1, (height, width)).permute(0, 3, 1, 2)
        pooled = F.avg_pool2d(grid, self.pool_size, stride=1, padding=self.pool_size // 2,
                              count_include_pad=False)
        return (pooled - grid).permute(0, 2, 3, 1).flatten(1, 2)

    def window_sums(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """The same average as ``k`` shifted sums along H, then along W, over the number of
        valid tokens: inductor fuses these into one loop (its ``avg_pool2d`` backward ran slower
        than eager's channels-last kernel), so a compiled model takes this form."""
        (height, width), radius = hw_shape, self.pool_size // 2
        grid = x.unflatten(1, (height, width))
        padded = F.pad(grid, (0, 0, radius, radius, radius, radius))
        rows = sum(padded[:, i:i + height] for i in range(self.pool_size))
        window = sum(rows[:, :, j:j + width] for j in range(self.pool_size))
        counts = [(torch.arange(size, device=x.device) + radius).clamp(max=size - 1)
                  - (torch.arange(size, device=x.device) - radius).clamp(min=0) + 1
                  for size in (height, width)]
        valid = (counts[0][:, None] * counts[1][None, :]).to(x.dtype).unsqueeze(-1)
        return (window / valid - grid).flatten(1, 2)

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'pool': k^2 C H W}`` (see the class docstring)."""
        return {'pool': float(self.pool_size ** 2 * self.embed_dims * hw_shape[0] * hw_shape[1])}
