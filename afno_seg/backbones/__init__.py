"""Backbones with pluggable token mixers: SegFormer's hierarchical MiT (:class:`MixerMiT`, for
segmentation) and an isotropic ViT (:class:`MixerViT`, the AFNO paper's ImageNet setup)."""
from .encoder_layer import MixerLayer
from .mit_checkpoint import load_pretrained_mit, official_to_mmseg
from .mixer_mit import ARCH_SETTINGS, MixerEncoderLayer, MixerMiT
from .mixer_vit import VIT_ARCH_SETTINGS, MixerViT, MixerViTLayer

__all__ = ['ARCH_SETTINGS', 'MixerEncoderLayer', 'MixerLayer', 'MixerMiT', 'MixerViT',
           'MixerViTLayer', 'VIT_ARCH_SETTINGS', 'load_pretrained_mit', 'official_to_mmseg']
