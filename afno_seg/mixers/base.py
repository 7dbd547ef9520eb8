"""The token-mixer contract shared by every mixer in :mod:`afno_seg.mixers`.

A mixer maps tokens ``x`` of shape ``(B, N, C)``, laid out in row-major order of an ``H x W`` grid
(``N == H * W``), to a tensor of the same shape. The encoder layer around it owns the pre-norm,
the residual and drop-path; a mixer only keeps an internal residual where its paper does (AFNO).

Cost convention (all mixers, see ``docs/flops.md``): :meth:`TokenMixer.flops` returns real
floating-point operations for ONE image, forward pass, as a dict of named terms. One real
multiply-add is 2 FLOPs; a complex multiply-add is 4 real multiply-adds (8 FLOPs). An FFT of N
complex points costs ``5 N log2 N``; a real-input (rfft) or real-output (irfft) transform costs
half, ``2.5 N log2 N`` (the radix-2 counts used by FFTW's benchmarks). Element-wise work
(activations, soft-shrink, softmax, biases, norms) is not counted, as in fvcore/mmengine's FLOP
counters.

Declarations (class attributes, read by :mod:`afno_seg.mixers.catalogue`; each class states its
own, none is inherited from a parent mixer): ``variants`` (the named settings every table,
benchmark, study and config lists), ``example_args`` / ``extra_examples`` (small constructor
arguments the test suites build it with), ``spectral``, ``stores_grid``, ``flop_terms`` and
``onnx_dynamic_shape``.
See ``docs/adding_a_mixer.md``.
"""
from dataclasses import dataclass, field
from typing import ClassVar

from mmengine.model import BaseModule
from torch import Tensor

__all__ = ['TokenMixer', 'Variant']


@dataclass(frozen=True)
class Variant:
    """A named setting of a mixer, e.g. AFNO-25%: its display label and constructor arguments.

    Args:
        label (str): Name shown in tables and plots, e.g. ``'AFNO-25%'``.
        args (dict): Constructor arguments beyond the stage's (``embed_dims``, ``num_heads``, ...).
            Default: {}.
        listed (bool): Part of the default lists (tables, benchmark sweeps, the study); False for
            references such as the composed AFNO, selectable by name only. Default: True.
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

    #: Short name -> :class:`Variant` (or a plain dict of arguments, labelled by its name).
    variants: ClassVar[dict] = {}
    #: Small constructor arguments besides ``embed_dims=16`` for the test suites (any grid >= 1).
    example_args: ClassVar[dict] = {}
    #: More named test cases, id suffix -> arguments, for code paths the default case skips.
    extra_examples: ClassVar[dict] = {}
    #: Works on the Fourier transform of the grid (a float32 island under autocast).
    spectral: ClassVar[bool] = False
    #: Has parameters sized by ``base_hw_shape`` (the stage grid of the training crop).
    stores_grid: ClassVar[bool] = False
    #: The keys of :meth:`flops`.
    flop_terms: ClassVar[tuple[str, ...]] = ()
    #: Exports to ONNX with dynamic H, W (False where sizes are computed in Python from the grid;
    #: may be a property when it depends on the arguments, as AFNO's truncation).
    onnx_dynamic_shape: ClassVar[bool] = True

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
