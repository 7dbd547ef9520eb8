"""Building a stage's token mixers: what a backbone stage tells a mixer config, and its grids.

A backbone (:mod:`.mixer_mit`, :mod:`.mixer_vit`) calls :func:`build_mixer` with the
:func:`stage_arguments` of each stage; the mixer classes themselves are in
:mod:`afno_seg.mixers` (start with :mod:`afno_seg.mixers.base`).
"""
import copy
import inspect
from collections.abc import Sequence

from torch import nn

from ..mixers.base import TokenMixer
from ..mixers.catalogue import registered_mixers
from ..registry import MMSEG_MODELS

__all__ = ['build_mixer', 'mixer_list', 'stage_arguments', 'stage_grids']


def stage_arguments(embed_dims: int, num_heads: int = 1, sr_ratio: int = 1,
                    base_hw_shape: Sequence[int] | None = None, qkv_bias: bool = True,
                    attn_drop_rate: float = 0., proj_drop_rate: float = 0.,
                    norm_cfg: dict | None = None) -> dict:
    """What a backbone stage tells its mixers; ``base_hw_shape`` is the stage grid of the
    training crop."""
    args = dict(embed_dims=embed_dims, num_heads=num_heads, sr_ratio=sr_ratio, qkv_bias=qkv_bias,
                attn_drop_rate=attn_drop_rate, proj_drop_rate=proj_drop_rate,
                norm_cfg=norm_cfg or dict(type='LN', eps=1e-6))
    if base_hw_shape is not None:
        args['base_hw_shape'] = tuple(int(n) for n in base_hw_shape)
    return args


def stage_grids(img_size: int | Sequence[int], patch_sizes: Sequence[int] = (7, 3, 3, 3),
                strides: Sequence[int] = (4, 2, 2, 2)) -> list[tuple[int, int]]:
    """Token grids of SegFormer's stages: a ``k x k`` stride-``s`` embedding padded by ``k // 2``
    gives ``floor((n + 2 (k // 2) - k) / s) + 1`` per axis (1024 -> 256, 128, 64, 32)."""
    grid = (img_size, ) * 2 if isinstance(img_size, int) else tuple(img_size)
    grids = []
    for kernel, stride in zip(patch_sizes, strides):
        grid = tuple((n + 2 * (kernel // 2) - kernel) // stride + 1 for n in grid)
        grids.append(grid)
    return grids


def mixer_list(mixers: dict | Sequence[dict], count: int, name: str) -> list[dict]:
    """A backbone's ``mixers`` argument as one config per stage (``name=count`` of them)."""
    if isinstance(mixers, dict):
        return [mixers] * count
    if isinstance(mixers, str) or not isinstance(mixers, Sequence) or len(mixers) != count:
        raise ValueError(f'mixers must be one dict or a list of {name}={count} dicts')
    return list(mixers)


def build_mixer(cfg: dict, **stage_args) -> nn.Module:
    """Build mixer config ``cfg``, adding each of ``stage_args`` the constructor takes and ``cfg``
    leaves out; ``embed_dims`` is the stage width and may not disagree."""
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'a mixer config must be a dict with a "type" key, got {cfg!r}')
    cfg = copy.deepcopy(dict(cfg))
    mixer_type = cfg['type']
    mixer_cls = mixer_type if inspect.isclass(mixer_type) else MMSEG_MODELS.get(mixer_type)
    if mixer_cls is None or not issubclass(mixer_cls, TokenMixer):
        problem = 'unknown mixer type' if mixer_cls is None else 'not a TokenMixer:'
        raise KeyError(f'{problem} {mixer_type!r}; registered mixers: '
                       f'{", ".join(registered_mixers()) or "none (is afno_seg.mixers imported?)"}')
    if 'embed_dims' in cfg and cfg['embed_dims'] != stage_args['embed_dims']:
        raise ValueError(f'mixer {mixer_type!r} sets embed_dims={cfg["embed_dims"]}, but its stage '
                         f'is {stage_args["embed_dims"]} channels wide; leave embed_dims unset')
    accepted = inspect.signature(mixer_cls).parameters
    for name, value in stage_args.items():
        if name in accepted and name not in cfg:
            cfg[name] = value
    return MMSEG_MODELS.build(cfg)
