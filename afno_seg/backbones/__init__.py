"""Backbones with pluggable token mixers: SegFormer's hierarchical MiT (:class:`MixerMiT`, for
segmentation) and an isotropic ViT (:class:`MixerViT`, the AFNO paper's ImageNet setup).

Reading order: a config's ``model.backbone`` (``configs/_base_/models/``) -> :mod:`.mixer_mit`
(stages) -> :mod:`.stage` (a stage's mixer config built with its width, heads and grid) ->
:mod:`.encoder_layer` (norms, residual) -> the mixer (:mod:`afno_seg.mixers`).
"""
from .encoder_layer import MixerLayer
from .mit_checkpoint import load_pretrained_mit, official_to_mmseg
from .mixer_mit import ARCH_SETTINGS, MixerMiT
from .mixer_vit import VIT_ARCH_SETTINGS, MixerViT
from .stage import build_mixer, stage_arguments, stage_grids

__all__ = ['ARCH_SETTINGS', 'MixerLayer', 'MixerMiT', 'MixerViT', 'VIT_ARCH_SETTINGS',
           'build_mixer', 'load_pretrained_mit', 'official_to_mmseg', 'stage_arguments',
           'stage_grids']
