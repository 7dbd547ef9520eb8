"""The cost of a config's segmentor: build it (no weights) and trace it per stage and component.

What ``tools/analysis/get_flops.py`` and ``tools/analysis/mixer_table.py`` run per config
(:func:`analyze_config`); the tracing itself is :func:`~afno_seg.analysis.breakdown
.analyze_segmentor`.
"""
import time

from mmengine.registry import init_default_scope
from mmseg.registry import MODELS

from ..backbones.mixer_mit import ARCH_SETTINGS
from ..engine.runner import load_config
from .breakdown import analyze_segmentor

__all__ = ['analyze_config', 'depth_scaled_cost', 'image_shape']


def image_shape(shape: list[int]) -> tuple[int, int]:
    """``--shape H W``, or one size for a square, as ``(H, W)``."""
    if len(shape) not in (1, 2):
        raise ValueError(f'--shape takes H W or one size, got {shape}')
    return shape[0], shape[-1]


def _build(cfg):
    """The segmentor of ``cfg``, random weights."""
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    model = MODELS.build(cfg.model)
    model.auxiliary_head = None  # training-only, as mmseg's get_flops
    return model


def analyze_config(config: str, shape: tuple[int, int], cfg_options: dict | None = None,
                   device: str = 'cpu', real_attention: bool = False,
                   mixer: str | None = None) -> dict:
    """Build ``config`` (a path or ``mmseg::...``, with the ``--mixer`` spec ``mixer``; no
    weights loaded) and return :func:`~afno_seg.analysis.breakdown.analyze_segmentor`'s result
    with ``config``, ``cfg_options``, ``mixer`` and ``trace_seconds`` added."""
    model = _build(load_config(config, cfg_options=cfg_options, mixer=mixer, pretrained=False))
    start = time.perf_counter()
    result = analyze_segmentor(model, shape, attention_stand_in=not real_attention,
                               device=device)
    result.update(config=str(config), cfg_options=cfg_options or {}, mixer=mixer,
                  trace_seconds=round(time.perf_counter() - start, 1))
    return result


def _model_key(cfg) -> str:
    """The segmentor config without the per-stage depths (and drop path, inert in eval): models
    with equal keys have identical stage layers, so their 1- and 2-layer traces are shared."""
    model = cfg.model.to_dict()
    for key in ('num_layers', 'drop_path_rate', 'arch'):
        model['backbone'].pop(key, None)
    return repr(sorted(model.items(), key=lambda kv: kv[0]))


def _extrapolate(shallow: dict, deep: dict, depths: list[int]) -> dict:
    """``shallow`` (1 layer per stage) and ``deep`` (2) traced: the result at ``depths``.

    Layers of a stage are identical modules on the same grid, so each stage row grows by
    ``deep - shallow`` per extra layer; rows outside the stages (decode head) are equal."""
    rows, total = [], dict(shallow['total'])
    for low, high in zip(shallow['rows'], deep['rows']):
        assert (low['group'], low['component']) == (high['group'], high['component'])
        row = dict(low)
        if low['group'].startswith('stage '):
            extra = depths[int(low['group'].split()[1]) - 1] - 1
            for key in ('macs', 'flops', 'params', 'analytic_flops'):
                if key in low:
                    step = high[key] - low[key]
                    row[key] = low[key] + extra * step
                    if key in total:
                        total[key] += extra * step
        rows.append(row)
    stages = {name: dict(info, layers=depths[int(name.split()[1]) - 1],
                         mixers={k: depths[int(name.split()[1]) - 1] for k in info['mixers']})
              for name, info in shallow['stages'].items()}
    return dict(shallow, rows=rows, total=total, stages=stages)


def depth_scaled_cost(config: str, mixer: str | None, shape: tuple[int, int],
                      cfg_options: dict | None = None, cache: dict | None = None) -> dict:
    """:func:`analyze_config`'s result for a SegFormer config at ``shape`` without tracing the
    whole depth: the model is traced with 1 and with 2 layers per stage and each stage's rows
    extrapolated linearly to its ``num_layers`` (exact: a stage repeats one layer on one grid;
    ``tests/test_mixer_switch.py`` checks it against a full trace). B5 at 1024 x 1024 thus costs
    two shallow traces instead of one of 52 layers, and B1-B5 share theirs through ``cache``.

    Args:
        config (str): Path or ``mmseg::...`` config with a MiT/MixerMiT backbone.
        mixer (str, optional): ``--mixer`` spec (None: the config's own mixers).
        shape (tuple[int, int]): Input ``(H, W)``.
        cfg_options (dict, optional): Overrides merged first.
        cache (dict, optional): Shallow traces by model key, shared between calls.

    Returns:
        dict: As :func:`analyze_config`, plus ``depth_scaled=True``.
    """
    cfg = load_config(config, cfg_options=cfg_options, mixer=mixer, pretrained=False)
    backbone = cfg.model.backbone
    if backbone.get('arch'):  # spell the sizes out, so that num_layers can change
        backbone.update(ARCH_SETTINGS[backbone.pop('arch')])
    depths = list(backbone.num_layers)
    cache = {} if cache is None else cache
    key = (_model_key(cfg), tuple(shape))
    start = time.perf_counter()
    if key not in cache:
        traced = []
        for depth in (1, 2):
            backbone.num_layers = [depth] * len(depths)
            traced.append(analyze_segmentor(_build(cfg), shape))
        cache[key] = traced
    result = _extrapolate(*cache[key], depths)
    result.update(config=str(config), cfg_options=cfg_options or {}, mixer=mixer,
                  depth_scaled=True, trace_seconds=round(time.perf_counter() - start, 1))
    return result
