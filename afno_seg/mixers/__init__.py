"""Token mixers: one module per method, all following :class:`~afno_seg.mixers.base.TokenMixer`.

Every module of this package is imported here, so a mixer registers itself (``@register_model``)
by being a file in it; :mod:`.catalogue` then lists it everywhere (``docs/adding_a_mixer.md``).
Each mixer module's ``__all__`` is re-exported.
"""
import importlib
import pkgutil

from .base import TokenMixer, Variant
from .catalogue import (
    build_mixer,
    catalogue_markdown,
    example_cases,
    example_configs,
    example_mixer,
    find_variant,
    mixer_catalogue,
    mixer_classes,
    mixer_variants,
    registered_mixers,
    stage_arguments,
    stage_grids,
)

__all__ = ['TokenMixer', 'Variant', 'build_mixer', 'catalogue_markdown', 'example_cases',
           'example_configs',
           'example_mixer',
           'find_variant', 'mixer_catalogue', 'mixer_classes', 'mixer_variants',
           'registered_mixers', 'stage_arguments', 'stage_grids']

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    _module = importlib.import_module(f'{__name__}.{_info.name}')
    if _info.name not in ('base', 'catalogue'):
        for _name in getattr(_module, '__all__', ()):
            globals()[_name] = getattr(_module, _name)
            __all__.append(_name)
del _info, _module
