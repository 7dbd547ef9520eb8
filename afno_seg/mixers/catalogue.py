"""The mixer catalogue: every registered token mixer, the variants it declares, and its builder.

Every list of mixers in the project (the contract and FLOP test suites, the backbone tests, the
complexity table, the benchmarks, the study, the docs table) is derived from here, so a new mixer
is one module in ``afno_seg/mixers/`` (``docs/adding_a_mixer.md``):

* :func:`registered_mixers` / :func:`mixer_classes` read mmseg's ``MODELS`` registry (every mixer
  is registered there and in mmpretrain's by :func:`afno_seg.registry.register_model`);
* :func:`mixer_catalogue` / :func:`mixer_variants` expand each class's declared ``variants``;
* :func:`example_cases` / :func:`example_mixer` build small instances from ``example_args``;
* :func:`build_mixer` builds a mixer config for a backbone stage, filling in the
  :func:`stage_arguments` the constructor takes; :func:`stage_grids` gives the stage grids.
"""
import copy
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from ..registry import MMSEG_MODELS
from .base import TokenMixer, Variant

__all__ = ['MixerVariant', 'build_mixer', 'catalogue_markdown', 'declared', 'example_cases',
           'example_configs', 'example_mixer',
           'find_variant', 'mixer_catalogue', 'mixer_classes', 'mixer_variants',
           'registered_mixers', 'stage_arguments', 'stage_grids']

#: Channels of the tokens the example mixers are built for (every example divides it).
EXAMPLE_EMBED_DIMS = 16


def declared(cls: type, name: str):
    """A declaration of ``cls`` itself (``variants``, ``example_args``, ...), never a parent's:
    FullSelfAttentionMixer derives from EfficientSelfAttentionMixer but is its own entry."""
    return vars(cls).get(name, getattr(TokenMixer, name))


def mixer_classes() -> list[type[TokenMixer]]:
    """The registered TokenMixer subclasses, in registration (module import) order."""
    return [cls for cls in dict.fromkeys(MMSEG_MODELS.module_dict.values())
            if isinstance(cls, type) and issubclass(cls, TokenMixer) and cls is not TokenMixer]


def registered_mixers() -> list[str]:
    """Class names of the registered mixers, sorted."""
    return sorted(cls.__name__ for cls in mixer_classes())


@dataclass(frozen=True)
class MixerVariant:
    """One row of the catalogue: short ``name``, display ``label``, class and arguments."""
    name: str
    label: str
    cls: type
    args: dict
    listed: bool = True

    @property
    def config(self) -> dict:
        """The mixer config, ``dict(type=ClassName, **args)``, as configs write it."""
        return dict(type=self.cls.__name__, **copy.deepcopy(self.args))

    @property
    def spectral(self) -> bool:
        return declared(self.cls, 'spectral')


def mixer_catalogue(include_unlisted: bool = False) -> list[MixerVariant]:
    """Every declared variant of every registered mixer (``listed`` ones unless asked)."""
    entries, seen = [], {}
    for cls in mixer_classes():
        for name, variant in declared(cls, 'variants').items():
            if not isinstance(variant, Variant):
                variant = Variant(label=name, args=dict(variant))
            if name in seen:
                raise ValueError(f'mixer variant {name!r} is declared by both {seen[name]} and '
                                 f'{cls.__name__}; rename one of them')
            seen[name] = cls.__name__
            if variant.listed or include_unlisted:
                entries.append(MixerVariant(name, variant.label, cls, dict(variant.args),
                                            variant.listed))
    return entries


def mixer_variants(include_unlisted: bool = False) -> dict[str, dict]:
    """Short name -> mixer config dict, e.g. ``{'afno25': dict(type='AFNOMixer', ...), ...}``."""
    return {entry.name: entry.config for entry in mixer_catalogue(include_unlisted)}


def find_variant(name: str) -> MixerVariant:
    """The catalogue entry called ``name`` (listed or not); a KeyError names the choices."""
    entries = {entry.name: entry for entry in mixer_catalogue(include_unlisted=True)}
    if name not in entries:
        raise KeyError(f'unknown mixer variant {name!r}; choose one of {", ".join(entries)}')
    return entries[name]


def example_cases() -> list[tuple[str, type, dict]]:
    """``(case id, class, kwargs)`` for every mixer: its ``example_args``, then each of its
    ``extra_examples`` (id ``ClassName-suffix``); kwargs include ``embed_dims``."""
    cases = []
    for cls in mixer_classes():
        examples = {'': declared(cls, 'example_args'), **declared(cls, 'extra_examples')}
        for suffix, args in examples.items():
            kwargs = dict(embed_dims=EXAMPLE_EMBED_DIMS, **copy.deepcopy(args))
            cases.append((cls.__name__ + (f'-{suffix}' if suffix else ''), cls, kwargs))
    return cases


def example_configs() -> dict[str, dict]:
    """Case id -> mixer config (``dict(type=..., **example args)``, no ``embed_dims``: the
    backbone fills in each stage's width) of every :func:`example_cases` case."""
    return {case_id: dict(type=cls.__name__, **{k: v for k, v in kwargs.items()
                                                if k != 'embed_dims'})
            for case_id, cls, kwargs in example_cases()}


def example_mixer(name: str | type, embed_dims: int = EXAMPLE_EMBED_DIMS) -> TokenMixer:
    """A small instance of mixer class ``name`` (a class or its registered name)."""
    cls = name if inspect.isclass(name) else MMSEG_MODELS.get(name)
    if cls is None or not issubclass(cls, TokenMixer):
        raise KeyError(f'unknown mixer {name!r}; registered: {", ".join(registered_mixers())}')
    return cls(embed_dims=embed_dims, **copy.deepcopy(declared(cls, 'example_args')))


def stage_arguments(embed_dims: int, num_heads: int = 1, sr_ratio: int = 1,
                    base_hw_shape: Sequence[int] | None = None, qkv_bias: bool = True,
                    attn_drop_rate: float = 0., proj_drop_rate: float = 0.,
                    norm_cfg: dict | None = None) -> dict:
    """What a backbone stage tells its mixers; :func:`build_mixer` passes each one only to
    constructors that take it. ``base_hw_shape``: the stage grid of the training crop."""
    args = dict(embed_dims=embed_dims, num_heads=num_heads, sr_ratio=sr_ratio, qkv_bias=qkv_bias,
                attn_drop_rate=attn_drop_rate, proj_drop_rate=proj_drop_rate,
                norm_cfg=norm_cfg or dict(type='LN', eps=1e-6))
    if base_hw_shape is not None:
        args['base_hw_shape'] = tuple(int(n) for n in base_hw_shape)
    return args


def stage_grids(img_size: int | Sequence[int], patch_sizes: Sequence[int] = (7, 3, 3, 3),
                strides: Sequence[int] = (4, 2, 2, 2)) -> list[tuple[int, int]]:
    """Token grids of SegFormer's stages for an image: each stage embeds the previous grid with a
    ``k x k`` stride-``s`` convolution padded by ``k // 2``, i.e. ``floor((n + 2 (k // 2) - k) / s)
    + 1`` per axis (1024 -> 256, 128, 64, 32 with MiT's kernels and strides)."""
    grid = (img_size, ) * 2 if isinstance(img_size, int) else tuple(img_size)
    grids = []
    for kernel, stride in zip(patch_sizes, strides):
        grid = tuple((n + 2 * (kernel // 2) - kernel) // stride + 1 for n in grid)
        grids.append(grid)
    return grids


def build_mixer(cfg: dict, **stage_args) -> nn.Module:
    """Build a mixer from ``cfg``, filling each of ``stage_args`` (:func:`stage_arguments`) only
    where the mixer's constructor has that parameter and ``cfg`` does not set it.
    ``embed_dims`` is the stage width and may not disagree."""
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


def catalogue_markdown() -> str:
    """The catalogue as a Markdown table (the README's mixer table; ``tools/analysis/
    list_mixers.py`` prints it and ``--update README.md`` rewrites it there)."""
    lines = ['| name | mixer | class | module | spectral | listed | arguments |',
             '|---|---|---|---|---|---|---|']
    for entry in mixer_catalogue(include_unlisted=True):
        module = entry.cls.__module__.replace('.', '/') + '.py'
        args = ', '.join(f'{k}={v!r}' for k, v in entry.args.items()) or '-'
        lines.append(f'| `{entry.name}` | {entry.label} | `{entry.cls.__name__}` | `{module}` | '
                     f'{"yes" if entry.spectral else "no"} | {"yes" if entry.listed else "no"} | '
                     f'{args} |')
    return '\n'.join(lines) + '\n'
