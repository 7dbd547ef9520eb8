"""MiT's key layout, written once: pretrained MiT files remapped onto MixerMiT, and the place of a
module in a MiT backbone.

Two key layouts exist for the same weights:

- official (SegFormer authors' ``mit_b0.pth`` .. ``mit_b5.pth``): ``patch_embed{s}.proj``,
  ``block{s}.{j}.attn.q`` / ``.kv`` / ``.proj`` / ``.sr`` / ``.norm``, ``block{s}.{j}.mlp.fc1`` /
  ``.dwconv.dwconv`` / ``.fc2`` (Linear), ``norm{s}``, plus the ImageNet classifier ``head``;
- mmseg (``MixVisionTransformer``, stage ``s`` -> index ``s - 1``): ``layers.{i}.0.projection``,
  ``layers.{i}.1.{j}.attn.attn.in_proj_weight`` (= cat(q, kv)), ``.attn.attn.out_proj``,
  ``.attn.sr``, ``.attn.norm``, ``layers.{i}.1.{j}.ffn.layers.{0,1,4}`` (1x1 convs),
  ``layers.{i}.2``.

:func:`load_pretrained_mit` is the key remap (:func:`mit_state_dict`) plus the project's one fit
check (:func:`~afno_seg.engine.checkpoint_fit.load_state`): every tensor outside the token mixers
must load (a miss means a wrong ``arch`` or a wrong file, cheaper found at start-up than after a
160k-iteration run); mixer tensors load where name and shape match (efficient attention loads
completely); the classifier ``head.*`` is skipped; the log names every tensor left out.
:func:`mit_position` reads ``layers.{stage}.{slot}[.{layer}.{part}]`` for the cost breakdown and
the spectrum probe.
"""
import re
from collections import OrderedDict
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..engine.checkpoint import read_state_dict, state_dict_of
from ..engine.checkpoint_fit import FitReport, load_state, mixer_prefixes

__all__ = ['MitPosition', 'detect_layout', 'load_pretrained_mit', 'mit_position',
           'mit_state_dict', 'official_to_mmseg']

#: A module of a MiT backbone (MixerMiT and mmseg's MixVisionTransformer share the tree), by its
#: name in the backbone or in a model around it: slot 0 the patch embedding, 1 the encoder layers
#: (``.{layer}.{attn|ffn|norm1|norm2}``), 2 the stage norm.
_MIT_MODULE = re.compile(r'^(?:.*?\.)?layers\.(\d+)\.([012])(?:\.(\d+)\.([^.]+))?(.*)$')


class MitPosition(NamedTuple):
    stage: int  # 0-based
    slot: int
    layer: int | None
    part: str | None
    rest: str  # the name below ``part`` (or below the slot), '' for the module itself


def mit_position(name: str) -> MitPosition | None:
    """Where module ``name`` sits in a MiT backbone, or None outside one."""
    match = _MIT_MODULE.match(name)
    if match is None:
        return None
    stage, slot, layer, part, rest = match.groups()
    return MitPosition(int(stage), int(slot), None if layer is None else int(layer), part, rest)


def detect_layout(keys) -> str:
    """'official' (SegFormer release) or 'mmseg' (MixVisionTransformer / MixerMiT)."""
    keys = list(keys)
    if any(k.startswith(('patch_embed1.', 'block1.')) for k in keys):
        return 'official'
    if any(k.startswith('layers.') for k in keys):
        return 'mmseg'
    raise ValueError('not a MiT checkpoint: expected keys like "patch_embed1.proj.weight" '
                     f'(official) or "layers.0.0.projection.weight" (mmseg); got {keys[:5]}')


# Official -> mmseg: the slot of each official module kind in ``layers.{stage}``, and the names
# that change below it (``attn.sr``, ``attn.norm``, ``norm1``, ``norm2`` keep theirs).
_SLOTS = {'patch_embed': 0, 'block': 1, 'norm': 2}
_RENAMES = {'proj.': 'projection.', 'attn.proj.': 'attn.attn.out_proj.',
            'mlp.fc1.': 'ffn.layers.0.', 'mlp.dwconv.dwconv.': 'ffn.layers.1.',
            'mlp.fc2.': 'ffn.layers.4.'}


def official_to_mmseg(state_dict: dict[str, Tensor]) -> OrderedDict:
    """An official SegFormer MiT state dict in mmseg's layout (``in_proj`` = cat(q, kv), q first
    as ``nn.MultiheadAttention`` splits it); other keys (``head.*``) are kept as they are, so
    that the loader reports them."""
    converted = OrderedDict()
    for key, value in state_dict.items():
        m = re.match(r'^(patch_embed|block|norm)(\d+)\.(\d+\.)?(.*)$', key)
        if m is None:
            converted[key] = value
            continue
        kind, stage, layer, name = m.groups()
        out = f'layers.{int(stage) - 1}.{_SLOTS[kind]}.{layer or ""}'
        if name.startswith('attn.q.'):
            kv_key = key.replace('attn.q.', 'attn.kv.')
            if kv_key not in state_dict:
                raise KeyError(f'{key} has no matching {kv_key} in the checkpoint')
            param = name[len('attn.q.'):]
            converted[f'{out}attn.attn.in_proj_{param}'] = torch.cat([value, state_dict[kv_key]])
        elif not name.startswith('attn.kv.'):  # kv went into in_proj together with q
            old = next((old for old in _RENAMES if name.startswith(old)), '')
            if old in ('mlp.fc1.', 'mlp.fc2.') and name.endswith('weight'):
                value = value.reshape(*value.shape, 1, 1)  # Linear -> 1x1 conv
            converted[out + _RENAMES.get(old, '') + name[len(old):]] = value
    return converted


def mit_state_dict(state: dict[str, Tensor], prefix: str | None = None) -> tuple[dict, str]:
    """A MiT state dict of either layout in mmseg's names (the key remap), and its layout.

    ``prefix``: keep only the keys under it, stripped (None: ``'backbone.'`` when no key is a
    backbone key, as in a segmentor or classifier checkpoint).
    """
    if prefix is None and not any(k.startswith(('layers.', 'patch_embed', 'block')) for k in state):
        prefix = 'backbone.' if any(k.startswith('backbone.') for k in state) else None
    state = state_dict_of(state, prefix)
    layout = detect_layout(state)
    return (official_to_mmseg(state) if layout == 'official' else state), layout


def load_pretrained_mit(model: nn.Module, path: str, prefix: str | None = None) -> FitReport:
    """Load a MiT checkpoint (either layout) into ``model`` (a MixerMiT) under the policy above.

    Args:
        model (nn.Module): The backbone.
        path (str): Local checkpoint file.
        prefix (str, optional): See :func:`mit_state_dict`. Default: None.

    Returns:
        FitReport: ``loaded``, ``new`` (mixer tensors left initialised), ``unused`` (checkpoint
        mixer and classifier tensors).
    """
    state, layout = mit_state_dict(read_state_dict(path), prefix)
    return load_state(model, state, f'pretrained {path} ({layout} MiT layout)',
                      mixer_prefixes(model) + ('head.', ),
                      advice='Outside its token mixers a pretrained file must hold every tensor '
                      'of the backbone: check the file and the backbone size (arch).')
