"""The mixer catalogue: every registered token mixer and the named variants it declares.

Every list of mixers in the project (tables, benchmarks, the study, the test suites, the README
table, ``configs/_base_/mixers/``) is read from here, so a new mixer is one module in
``afno_seg/mixers/`` (``docs/adding_a_mixer.md``). Building a mixer for a backbone stage is
:mod:`afno_seg.backbones.stage`.
"""
import copy
import inspect
from dataclasses import dataclass

from ..registry import MMSEG_MODELS
from .base import TokenMixer

__all__ = ['MixerVariant', 'base_config_text', 'catalogue_markdown', 'declared', 'find_variant',
           'is_spectral', 'mixer_catalogue', 'mixer_classes', 'mixer_variants',
           'registered_mixers', 'stores_grid']


def declared(cls: type, name: str):
    """A declaration of ``cls`` itself (``variants``, ``example_args``, ...), never a parent's:
    FullSelfAttentionMixer derives from EfficientSelfAttentionMixer but is its own entry."""
    return vars(cls).get(name, getattr(TokenMixer, name))


def is_spectral(cls: type) -> bool:
    """Works on the Fourier transform of the grid: it counts an ``'fft'`` FLOP term."""
    return 'fft' in declared(cls, 'flop_terms')


def stores_grid(cls: type) -> bool:
    """Has parameters sized by a grid: its constructor takes ``base_hw_shape``."""
    return 'base_hw_shape' in inspect.signature(cls).parameters


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
        return is_spectral(self.cls)


def mixer_catalogue(include_unlisted: bool = False) -> list[MixerVariant]:
    """Every declared variant of every registered mixer (``listed`` ones unless asked)."""
    entries, seen = [], {}
    for cls in mixer_classes():
        for name, variant in declared(cls, 'variants').items():
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


def base_config_text(entry: MixerVariant) -> str:
    """``configs/_base_/mixers/{name}.py`` of a variant (``{name}_mixer = dict(...)``), as
    ``tools/analysis/list_mixers.py --write-configs`` writes it from the class's declaration."""
    module = entry.cls.__module__.replace('.', '/') + '.py'
    fields = [f"type='{entry.cls.__name__}'"] + [f'{k}={v!r}' for k, v in entry.args.items()]
    body = fields[0] if len(fields) == 1 else '\n    ' + ',\n    '.join(fields)
    return (f"# {entry.label}: {entry.cls.__name__}.variants['{entry.name}']\n# in {module}, "
            'written here by tools/analysis/list_mixers.py --write-configs.\n'
            f'{entry.name}_mixer = dict({body})\n')


def catalogue_markdown() -> str:
    """The catalogue as a Markdown table (the README's, ``tools/analysis/list_mixers.py``)."""
    lines = ['| name | mixer | class | module | spectral | listed | arguments |',
             '|---|---|---|---|---|---|---|']
    for entry in mixer_catalogue(include_unlisted=True):
        module = entry.cls.__module__.replace('.', '/') + '.py'
        args = ', '.join(f'{k}={v!r}' for k, v in entry.args.items()) or '-'
        lines.append(f'| `{entry.name}` | {entry.label} | `{entry.cls.__name__}` | `{module}` | '
                     f'{"yes" if entry.spectral else "no"} | {"yes" if entry.listed else "no"} | '
                     f'{args} |')
    return '\n'.join(lines) + '\n'
