"""The cost of a config's segmentor: build it (no weights) and trace it per stage and component.

What ``tools/analysis/get_flops.py`` and ``tools/analysis/mixer_table.py`` run per config
(:func:`analyze_config`); the tracing itself is :func:`~afno_seg.analysis.breakdown
.analyze_segmentor`.
"""
import time

from mmengine.registry import init_default_scope

__all__ = ['analyze_config', 'build_segmentor', 'image_shape']


def image_shape(shape: list[int]) -> tuple[int, int]:
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    raise ValueError(f'--shape takes H W or one size, got {shape}')


def build_segmentor(config: str, cfg_options: dict | None = None, mixer: str | None = None):
    """Build the model of ``config`` (a path or ``mmseg::...``; weights are not loaded), with the
    backbone mixers of the ``--mixer`` spec ``mixer`` if given, and return ``(model, cfg)``."""
    from mmseg.registry import MODELS

    import afno_seg  # noqa: F401  (registers the backbone and mixers)

    from ..mixer_switch import load_switched_config
    cfg = load_switched_config(config, mixer, cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    model = MODELS.build(cfg.model)
    if getattr(model, 'auxiliary_head', None) is not None:
        model.auxiliary_head = None  # training-only, as mmseg's get_flops
    return model, cfg


def analyze_config(config: str, shape: tuple[int, int], cfg_options: dict | None = None,
                   device: str = 'cpu', real_attention: bool = False,
                   mixer: str | None = None) -> dict:
    """Build ``config`` (with the ``--mixer`` spec ``mixer``) and return
    :func:`afno_seg.analysis.breakdown.analyze_segmentor`'s result with ``config``,
    ``cfg_options``, ``mixer`` and ``trace_seconds`` added."""
    from .breakdown import analyze_segmentor
    model, _ = build_segmentor(config, cfg_options, mixer)
    start = time.perf_counter()
    result = analyze_segmentor(model, shape, attention_stand_in=not real_attention,
                               device=device)
    result.update(config=str(config), cfg_options=cfg_options or {}, mixer=mixer,
                  trace_seconds=round(time.perf_counter() - start, 1))
    return result
