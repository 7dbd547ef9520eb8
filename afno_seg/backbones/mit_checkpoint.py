"""MiT's key layout, written once: pretrained MiT files remapped onto MixerMiT, and the place of a
module in a MiT backbone.

Three key layouts exist for the same weights, detected from the keys (:func:`detect_layout`):

- official (SegFormer authors' ``mit_b0.pth`` .. ``mit_b5.pth``): ``patch_embed{s}.proj``,
  ``block{s}.{j}.attn.q`` / ``.kv`` / ``.proj`` / ``.sr`` / ``.norm``, ``block{s}.{j}.mlp.fc1`` /
  ``.dwconv.dwconv`` / ``.fc2`` (Linear), ``norm{s}``, plus the ImageNet classifier ``head``;
- mmseg (``MixVisionTransformer``, stage ``s`` -> index ``s - 1``): ``layers.{i}.0.projection``,
  ``layers.{i}.1.{j}.attn.attn.in_proj_weight`` (= cat(q, kv)), ``.attn.attn.out_proj``,
  ``.attn.sr``, ``.attn.norm``, ``layers.{i}.1.{j}.ffn.layers.{0,1,4}`` (1x1 convs),
  ``layers.{i}.2``;
- transformers (Hugging Face ``nvidia/mit-b*``, ``nvidia/segformer-*``; stage ``s`` 0-based,
  under ``segformer.`` in the ``SegformerFor*`` files): ``encoder.patch_embeddings.{s}``,
  ``encoder.block.{s}.{j}.attention.self.{query,key,value,sr,layer_norm}``,
  ``.attention.output.dense``, ``.layer_norm_{1,2}``, ``.mlp.{dense1,dwconv.dwconv,dense2}``,
  ``encoder.layer_norm.{s}``: the names of the files on the Hub, which ``save_pretrained`` of
  transformers 5 still writes; its modules' own names (``stages.{s}.blocks.{j}.attention.q_proj``,
  ...) are read too. Given a folder (as ``hf download`` leaves it), the weights file in it is
  read; a ``config.json`` beside the weights is checked against the backbone's sizes.

:func:`load_pretrained_mit` is the key remap (:func:`mit_state_dict`) plus the project's one fit
check (:func:`~afno_seg.engine.checkpoint_fit.load_state`): every tensor outside the token mixers
must load (a miss means a wrong ``arch`` or a wrong file, cheaper found at start-up than after a
160k-iteration run); mixer tensors load where name and shape match (efficient attention loads
completely); classifiers (``head.*``, ``classifier.*``) and a decode head are skipped; the log
names every tensor left out (mmengine's ``load_state_dict``).
:func:`mit_position` reads ``layers.{stage}.{slot}[.{layer}.{part}]`` for the cost breakdown and
the spectrum probe.
"""
import json
import os.path as osp
import re
from collections import OrderedDict
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..engine.checkpoint import CheckpointError, read_state_dict
from ..engine.checkpoint_fit import CheckpointMismatchError, load_state, mixer_prefixes

__all__ = ['HF_WEIGHTS', 'MitPosition', 'check_hf_config', 'detect_layout', 'load_pretrained_mit',
           'mit_position', 'mit_state_dict', 'official_to_mmseg', 'transformers_to_official',
           'weights_file']

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
    """'official' (SegFormer release), 'mmseg' (MixVisionTransformer / MixerMiT) or
    'transformers' (Hugging Face)."""
    keys = list(keys)
    if any(k.startswith(('patch_embed1.', 'block1.')) for k in keys):
        return 'official'
    if any(k.startswith('layers.') for k in keys):
        return 'mmseg'
    if any(_HF_KEY.match(k) for k in keys):
        return 'transformers'
    raise ValueError('not a MiT checkpoint: expected keys like "patch_embed1.proj.weight" '
                     '(official), "layers.0.0.projection.weight" (mmseg) or '
                     f'"segformer.encoder.patch_embeddings.0.proj.weight" (transformers); got '
                     f'{keys[:5]}')


# transformers -> official. A key: optional ``segformer.``, then the Hub files' names
# (``encoder.{kind}.{stage}.``) or transformers 5's module names (``stages.{stage}.{kind}.``).
_HF_KEY = re.compile(r'^(?:segformer\.)?(?:encoder\.(patch_embeddings|block|layer_norm)\.(\d+)|'
                     r'stages\.(\d+)\.(patch_embeddings|blocks|layer_norm))\.(.*)$')
# Names below ``block{s}.{j}.`` (both generations); ``k``/``v`` are joined into ``kv`` after.
_HF_BLOCK = {'layer_norm_1.': 'norm1.', 'layernorm_before.': 'norm1.',
             'layer_norm_2.': 'norm2.', 'layernorm_after.': 'norm2.',
             'attention.self.query.': 'attn.q.', 'attention.q_proj.': 'attn.q.',
             'attention.self.key.': 'attn.k.', 'attention.k_proj.': 'attn.k.',
             'attention.self.value.': 'attn.v.', 'attention.v_proj.': 'attn.v.',
             'attention.self.sr.': 'attn.sr.',
             'attention.sequence_reduction.sequence_reduction.': 'attn.sr.',
             'attention.self.layer_norm.': 'attn.norm.',
             'attention.sequence_reduction.layer_norm.': 'attn.norm.',
             'attention.output.dense.': 'attn.proj.', 'attention.o_proj.': 'attn.proj.',
             'mlp.dense1.': 'mlp.fc1.', 'mlp.dense2.': 'mlp.fc2.'}


def transformers_to_official(state_dict: dict[str, Tensor]) -> OrderedDict:
    """A transformers SegFormer state dict with the encoder in the official layout (``kv`` =
    cat(key, value)); other keys (``classifier.*``, ``decode_head.*``) are kept as they are."""
    converted = OrderedDict()
    for key, value in state_dict.items():
        m = _HF_KEY.match(key)
        if m is None:
            converted[key] = value
            continue
        kind, stage, stage5, kind5, name = m.groups()
        kind, stage = kind or kind5, int(stage or stage5) + 1
        if kind == 'patch_embeddings':
            key = f'patch_embed{stage}.' + name.replace('layer_norm.', 'norm.')
        elif kind == 'layer_norm':
            key = f'norm{stage}.{name}'
        else:
            layer, name = name.split('.', 1)
            old = next((old for old in _HF_BLOCK if name.startswith(old)), '')
            key = f'block{stage}.{layer}.' + _HF_BLOCK.get(old, '') + name[len(old):]
        converted[key] = value
    for key in [k for k in converted if '.attn.k.' in k]:
        value_key = key.replace('.attn.k.', '.attn.v.')
        if value_key not in converted:
            raise KeyError(f'{key} has no matching {value_key} in the checkpoint')
        converted[key.replace('.attn.k.', '.attn.kv.')] = torch.cat(
            [converted.pop(key), converted.pop(value_key)])
    return converted


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
    """A MiT state dict of any layout in mmseg's names (the key remap), and its layout.

    ``prefix``: keep only the keys under it, stripped (None: ``'backbone.'`` when no key is a
    backbone key, as in a segmentor or classifier checkpoint)."""
    if prefix is None and not any(k.startswith(('layers.', 'patch_embed', 'block')) for k in state):
        prefix = 'backbone.' if any(k.startswith('backbone.') for k in state) else None
    if prefix:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    layout = detect_layout(state)
    if layout == 'transformers':
        state = transformers_to_official(state)
    return (state if layout == 'mmseg' else official_to_mmseg(state)), layout


#: The weights file of a transformers folder, in order of preference (safetensors: data only).
HF_WEIGHTS = ('model.safetensors', 'pytorch_model.bin')


def weights_file(path: str) -> str:
    """``path``, or the weights file in the folder ``path`` (as ``hf download`` leaves it)."""
    path = osp.expanduser(str(path))
    if not osp.isdir(path):
        return path
    found = [osp.join(path, name) for name in HF_WEIGHTS if osp.isfile(osp.join(path, name))]
    if not found:
        raise CheckpointError(f'{path} is a folder without {" or ".join(HF_WEIGHTS)}: download '
                              'the weights into it (docs/configs.md, "MiT ImageNet weights") or '
                              'pass a checkpoint file')
    return found[0]


def check_hf_config(model: nn.Module, weights: str) -> None:
    """Refuse ``weights`` when the ``config.json`` beside them (a transformers folder) describes
    another MiT than ``model``'s sizes: one line naming both."""
    config = osp.join(osp.dirname(weights), 'config.json')
    if not osp.isfile(config):
        return
    with open(config) as f:
        hf = json.load(f)
    theirs = f'depths {hf.get("depths")}, widths {hf.get("hidden_sizes")}' \
        if hf.get('model_type') == 'segformer' else f'model_type {hf.get("model_type")!r}'
    ours = f'depths {list(model.num_layers)}, widths ' \
        f'{[model.embed_dims * h for h in model.num_heads]}'
    if theirs != ours:
        raise CheckpointMismatchError(
            f'{config} describes a MiT of {theirs}; the backbone has {ours}: take the weights '
            'of the backbone\'s size or set model.backbone.arch to theirs')


def load_pretrained_mit(model: nn.Module, path: str, prefix: str | None = None) -> None:
    """Load a MiT checkpoint (any layout) into ``model`` (a MixerMiT) under the policy above.

    Args:
        model (nn.Module): The backbone.
        path (str): Local checkpoint file, or a transformers folder (``config.json`` and
            ``model.safetensors`` or ``pytorch_model.bin``).
        prefix (str, optional): See :func:`mit_state_dict`. Default: None.
    """
    weights = weights_file(path)
    check_hf_config(model, weights)
    state, layout = mit_state_dict(read_state_dict(weights), prefix)
    load_state(model, state, f'pretrained {weights} ({layout} MiT layout)',
               mixer_prefixes(model) + ('head.', 'classifier.', 'decode_head.'),
               advice='Outside its token mixers a pretrained file must hold every tensor of the '
               'backbone: check the file and the backbone size (arch).')
