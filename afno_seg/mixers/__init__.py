"""Token mixers: one module per method, all following :class:`~afno_seg.mixers.base.TokenMixer`.

A mixer registers itself (``@register_model``) when its module is imported below; a new mixer
file is one import line here (``docs/adding_a_mixer.md``). :mod:`.catalogue` lists them.
"""
from .aff import AFFMixer
from .afno import AFNOMixer
from .attention import EfficientSelfAttentionMixer, FullSelfAttentionMixer
from .axial import AxialAttentionMixer
from .base import MixerAlone, TokenMixer, Variant
from .catalogue import (
    catalogue_markdown,
    find_variant,
    is_spectral,
    mixer_catalogue,
    mixer_classes,
    mixer_variants,
    registered_mixers,
    stores_grid,
)
from .dff import DynamicFilterMixer
from .fnet import FNetMixer
from .fno import FNOMixer
from .forms import FORMS, current_form, use_form
from .gfn import GlobalFilterMixer, resample_filter
from .long_short import LongShortAttentionMixer
from .msca import MSCAMixer
from .pooling import PoolingMixer

__all__ = ['AFFMixer', 'AFNOMixer', 'AxialAttentionMixer', 'DynamicFilterMixer',
           'EfficientSelfAttentionMixer', 'FNOMixer', 'FORMS',
           'FNetMixer', 'FullSelfAttentionMixer', 'GlobalFilterMixer', 'LongShortAttentionMixer',
           'MixerAlone', 'MSCAMixer', 'PoolingMixer', 'TokenMixer', 'Variant',
           'catalogue_markdown', 'current_form',
           'find_variant', 'is_spectral', 'mixer_catalogue', 'mixer_classes', 'mixer_variants',
           'registered_mixers', 'resample_filter', 'stores_grid', 'use_form']
