"""One decorator that registers a module in both MMSegmentation's and MMPretrain's ``MODELS``.

Configs of either library then build afno_seg modules by ``type=...`` after
``custom_imports = dict(imports=['afno_seg'], allow_failed_imports=False)``.
"""
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmseg.registry import MODELS as MMSEG_MODELS

__all__ = ['MMPRETRAIN_MODELS', 'MMSEG_MODELS', 'register_model']


def register_model(cls: type) -> type:
    """Class decorator: register ``cls`` under its own name in mmseg's and mmpretrain's MODELS."""
    for registry in (MMSEG_MODELS, MMPRETRAIN_MODELS):
        registry.register_module(module=cls)
    return cls
