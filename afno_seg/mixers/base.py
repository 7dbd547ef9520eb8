"""The token-mixer contract shared by every mixer in :mod:`afno_seg.mixers`.

A mixer maps tokens ``x (B, N, C)``, in row-major order of an ``H x W`` grid (``N == H * W``),
to ``(B, N, C)``; the encoder layer around it (:mod:`afno_seg.backbones.encoder_layer`) owns the
pre-norm, the residual and drop-path. :meth:`TokenMixer.flops` counts as ``docs/flops.md`` says.
The class attributes are declarations :mod:`.catalogue` reads (``docs/adding_a_mixer.md``).
"""
from dataclasses import dataclass, field
from typing import ClassVar

from mmengine.model import BaseModule
from torch import Tensor, nn

__all__ = ['MixerAlone', 'TokenMixer', 'Variant']


@dataclass(frozen=True)
class Variant:
    """A named setting of a mixer, e.g. AFNO-25%.

    Args:
        label (str): Name shown in tables and plots, e.g. ``'AFNO-25%'``.
        args (dict): Constructor arguments beyond the stage's. Default: {}.
        listed (bool): In the default lists (tables, benchmarks, study, configs); False for
            references selectable by name only. Default: True.
    """
    label: str
    args: dict = field(default_factory=dict)
    listed: bool = True


class TokenMixer(BaseModule):
    """Base class: ``forward(x (B, N, C), hw_shape) -> (B, N, C)`` and ``flops(hw_shape)``.

    Args:
        embed_dims (int): Channels C of the tokens.
        init_cfg (dict, optional): mmengine initialisation config. Default: None.
    """

    #: Short name -> :class:`Variant`.
    variants: ClassVar[dict] = {}
    #: Small constructor arguments besides ``embed_dims=16`` for the test suites (any grid >= 1).
    example_args: ClassVar[dict] = {}
    #: More named test cases, id suffix -> arguments, for code paths the default case skips.
    extra_examples: ClassVar[dict] = {}
    #: The keys of :meth:`flops`; ``'fft'`` among them makes the mixer spectral.
    flop_terms: ClassVar[tuple[str, ...]] = ()
    #: Exports to ONNX with dynamic H, W (may be a property that depends on the arguments).
    onnx_dynamic_shape: ClassVar[bool] = True
    #: Forms besides ``formula(x, hw_shape)``, name -> ``fn(mixer, x, hw_shape)`` (:mod:`.forms`).
    forms: ClassVar[dict] = {}

    def __init__(self, embed_dims: int, init_cfg: dict | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.embed_dims = embed_dims

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
        raise NotImplementedError

    def flops(self, hw_shape: tuple[int, int]) -> dict[str, float]:
        """Analytic real FLOPs of one forward pass on one image, by named term."""
        raise NotImplementedError

    @staticmethod
    def check_heads(embed_dims: int, num_heads: int) -> None:
        """Attention mixers split the channels into heads: ``num_heads`` must divide them."""
        if num_heads < 1 or embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_heads '
                             f'({num_heads})')

    @staticmethod
    def check_tokens(x: Tensor, hw_shape: tuple[int, int]) -> tuple[int, int]:
        """Validate ``x`` against ``hw_shape`` and return ``(H, W)``."""
        height, width = hw_shape
        if x.dim() != 3 or x.shape[1] != height * width:
            raise ValueError(f'expected tokens of shape (B, {height}*{width}, C) for grid '
                             f'{tuple(hw_shape)}, got {tuple(x.shape)}')
        return height, width


class MixerAlone(nn.Module):
    """``forward(x) = mixer(x, hw_shape)``: one mixer as a one-tensor module, for tracing,
    export and timing it by itself."""

    def __init__(self, mixer: nn.Module, hw_shape: tuple[int, int]) -> None:
        super().__init__()
        self.mixer, self.hw_shape = mixer, tuple(hw_shape)

    def forward(self, x: Tensor) -> Tensor:
        return self.mixer(x, self.hw_shape)
