"""DFFormer's dynamic filter: GFN's global filter made input-dependent by a routing MLP.

References:
    Tatsunami, Taki. "FFT-based Dynamic Token Mixer for Vision." AAAI 2024. arXiv:2303.03932.
    Released code: okojoalg/dfformer (``DynamicFilter`` in ``models/dfformer.py``; the
    segmentation backbones build it with ``weight_resize=True``).
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import register_model
from .base import TokenMixer, Variant
from .export import dff_matmul
from .fast import dff_fast
from .forms import select
from .spectral import irfft2, rfft2, rfft2_flops, run_in_fp32

__all__ = ['DynamicFilterMixer', 'StarReLU', 'resize_filters']


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """``layer(x)`` with its parameters in ``x.dtype`` (inside the float32 island)."""
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    return F.linear(x, layer.weight.to(x.dtype), bias)


class StarReLU(nn.Module):
    """``s ReLU(x)^2 + b`` with a learnable scalar scale ``s`` (1) and bias ``b`` (0)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale.to(x.dtype) * F.relu(x).square() + self.bias.to(x.dtype)


class RoutingMLP(nn.Module):
    """``fc2(StarReLU(fc1(x)))``, no biases: the released ``Mlp`` as ``reweight`` uses it."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=False)
        self.act = StarReLU()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return _linear(self.fc2, self.act(_linear(self.fc1, x)))


def resize_filters(weight: Tensor, size: tuple[int, int]) -> Tensor:
    """Filters ``(h, w, K, 2)`` resized to ``(H, W', K, 2)`` as the released segmentation code
    does: bicubic (a = -0.75, border taps clamped), corners aligned, each of the 2K real planes
    (real and imaginary parts apart) on its own; ``weight`` itself at its own size."""
    if tuple(weight.shape[:2]) == tuple(size):
        return weight
    height, width, filters, _ = weight.shape
    planes = weight.reshape(1, height, width, 2 * filters).permute(0, 3, 1, 2)
    planes = F.interpolate(planes, size=tuple(size), mode='bicubic', align_corners=True)
    return planes.permute(0, 2, 3, 1).reshape(*size, filters, 2)


@register_model
class DynamicFilterMixer(TokenMixer):
    """Dynamic filter (DFFormer, Tatsunami & Taki 2024), ``D = int(e C)`` channels inside::

        r = softmax_k( fc2(StarReLU(fc1(mean_n X))) )       (B, K, D), softmax over the K filters
        U = StarReLU(X W1)                                   pwconv1, (B, N, D)
        G_b = sum_k r[b, k] F_k                              (B, D, H, W//2+1) complex
        out = irfft2(rfft2(U) * G_b) W2                      pwconv2

    ``F_k`` are K complex global filters shared across channels, stored at ``base_hw_shape``
    ``(H0, W0)`` as ``complex_weights (H0, W0//2+1, K, 2)`` and resized to ``(H, W//2+1)`` for
    other grids bicubically, corners aligned (:func:`resize_filters`, the released segmentation
    code's ``weight_resize=True``). Parameter names and shapes are the released ones (its state
    dict loads unmapped); its ``act2`` is the identity and has none. Everything runs in float32
    under autocast (the released pwconvs run in half precision there). No residual. Forms
    (:mod:`.forms`): ``fast`` the spectral product with a written-out backward
    (:func:`.fast.dff_fast`), ``matmul`` :mod:`.export`'s DFT.

    Cost (:meth:`flops`): pwconvs ``4 N C D``; routing MLP ``2 C Cr + 2 Cr K D``; ``2 rfft2`` of
    D channels; filter: ``4 K D`` (mixing the real and imaginary planes) plus 6 (the complex
    product) per mode and channel, ``(4 K + 6) D H (W//2+1)``.

    Args:
        embed_dims (int): Channels C.
        base_hw_shape (tuple[int, int]): Grid ``(H0, W0)`` the filters are stored at (the
            released ``size``). Default: (14, 14).
        expansion_ratio (float): ``D = int(expansion_ratio * C)``. Default: 2.
        reweight_expansion_ratio (float): Routing MLP width ``Cr = int(ratio * C)``.
            Default: 0.25.
        num_filters (int): K. Default: 4.
        bias (bool): Biases in pwconv1 and pwconv2 (the routing MLP never has them).
            Default: False.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    variants = {'dff': Variant('Dynamic filter')}
    # Stored at 8 x 8: the suites' other grids (non-square, odd) run through the resize.
    example_args = dict(base_hw_shape=(8, 8))
    extra_examples = {'base-grid-6x10-k2-bias': dict(base_hw_shape=(6, 10), num_filters=2,
                                                     expansion_ratio=1.5, bias=True)}
    flop_terms = ('pwconv', 'routing', 'fft', 'filter')
    forms = {'fast': dff_fast, 'matmul': dff_matmul}

    def __init__(self, embed_dims: int, base_hw_shape: tuple[int, int] = (14, 14),
                 expansion_ratio: float = 2, reweight_expansion_ratio: float = 0.25,
                 num_filters: int = 4, bias: bool = False, init_cfg: dict | None = None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.base_hw_shape = tuple(int(size) for size in base_hw_shape)
        if len(self.base_hw_shape) != 2 or min(self.base_hw_shape) < 1:
            raise ValueError(f'base_hw_shape must be two positive sizes, got {base_hw_shape}')
        self.med_channels = int(expansion_ratio * embed_dims)
        self.reweight_channels = int(reweight_expansion_ratio * embed_dims)
        for name, value, size in (('expansion_ratio', expansion_ratio, self.med_channels),
                                  ('reweight_expansion_ratio', reweight_expansion_ratio,
                                   self.reweight_channels)):
            if size < 1:
                raise ValueError(f'{name} * embed_dims must be at least 1, got {value} * '
                                 f'{embed_dims}')
        if num_filters < 1:
            raise ValueError(f'num_filters must be at least 1, got {num_filters}')
        self.num_filters = num_filters
        self.pwconv1 = nn.Linear(embed_dims, self.med_channels, bias=bias)
        self.act1 = StarReLU()
        self.reweight = RoutingMLP(embed_dims, self.reweight_channels,
                                   num_filters * self.med_channels)
        base_height, base_width = self.base_hw_shape
        self.complex_weights = nn.Parameter(
            0.02 * torch.randn(base_height, base_width // 2 + 1, num_filters, 2))
        self.pwconv2 = nn.Linear(self.med_channels, embed_dims, bias=bias)

    def routing(self, x: Tensor) -> Tensor:
        """``r (B, K, D)``: each channel's weights of the K filters, summing to 1 over K."""
        logits = self.reweight(x.mean(1))
        return logits.view(x.shape[0], self.num_filters, self.med_channels).softmax(dim=1)

    def filters_at(self, hw_shape: tuple[int, int], dtype: torch.dtype) -> Tensor:
        """The K filters of an ``H x W`` grid, ``(H, W//2+1, K, 2)`` real in ``dtype``."""
        size = (hw_shape[0], hw_shape[1] // 2 + 1)
        return resize_filters(self.complex_weights.to(dtype), size)

    def expand(self, x: Tensor) -> Tensor:
        """``StarReLU(X W1)``: tokens ``(B, N, C) -> (B, N, D)``."""
        return self.act1(_linear(self.pwconv1, x))

    def project(self, u: Tensor) -> Tensor:
        """``U W2``: ``(B, N, D) -> (B, N, C)``."""
        return _linear(self.pwconv2, u)

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        self.check_tokens(x, hw_shape)
        return run_in_fp32(select(self), x, tuple(hw_shape))

    def routed_filter(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        """``G (B, D, H, W//2+1)`` complex: each image's routed mixture of the K filters."""
        filters = self.filters_at(hw_shape, x.dtype)  # (H, W', K, 2) -> (K, H W' 2)
        kernel = self.routing(x).mT @ filters.permute(2, 0, 1, 3).reshape(self.num_filters, -1)
        return torch.view_as_complex(kernel.view(*kernel.shape[:2], hw_shape[0], -1, 2))

    def formula(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        spectrum = rfft2(self.expand(x), hw_shape)
        return self.project(irfft2(spectrum * self.routed_filter(x, hw_shape), hw_shape))

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """``{'pwconv', 'routing', 'fft': rfft2 + irfft2, 'filter': mixing + product}``."""
        height, width = hw_shape
        channels, med, filters = self.embed_dims, self.med_channels, self.num_filters
        return {
            'pwconv': 4.0 * height * width * channels * med,
            'routing': 2.0 * self.reweight_channels * (channels + filters * med),
            'fft': 2 * rfft2_flops(hw_shape, med),
            'filter': (4.0 * filters + 6.0) * med * height * (width // 2 + 1),
        }
