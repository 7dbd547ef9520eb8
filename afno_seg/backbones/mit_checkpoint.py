"""Loading MiT ImageNet checkpoints into :class:`~afno_seg.backbones.MixerMiT`.

Two key layouts exist for the same weights:

- official (SegFormer authors' ``mit_b0.pth`` .. ``mit_b5.pth``): ``patch_embed{s}.proj``,
  ``block{s}.{j}.attn.q`` / ``.kv`` / ``.proj`` / ``.sr`` / ``.norm``, ``block{s}.{j}.mlp.fc1`` /
  ``.dwconv.dwconv`` / ``.fc2`` (Linear), ``norm{s}``, plus the ImageNet classifier ``head``;
- mmseg (``MixVisionTransformer``, stage ``s`` -> index ``s - 1``): ``layers.{i}.0.projection``,
  ``layers.{i}.1.{j}.attn.attn.in_proj_weight`` (= cat(q, kv)), ``.attn.attn.out_proj``,
  ``.attn.sr``, ``.attn.norm``, ``layers.{i}.1.{j}.ffn.layers.{0,1,4}`` (1x1 convs),
  ``layers.{i}.2``.

Policy (why errors rather than warnings): every tensor outside the mixers (patch embeddings,
norms, Mix-FFNs) must load, and a missing, unexpected or mis-shaped one is an error, because it
always means a wrong ``arch`` or a wrong file, and finding that out after a 160k-iteration run on
8 GPUs is far costlier than at start-up. Mixer tensors (``layers.{i}.1.{j}.attn.*``) load where
name and shape match (efficient attention loads completely); the rest are logged as newly
initialised, and checkpoint attention tensors that the chosen mixer lacks are logged as unused.
The classifier ``head.*`` is logged as skipped. Nothing is dropped without a log line.
"""
import logging
import os.path as osp
import re
from collections import OrderedDict, defaultdict

import torch
from mmengine.logging import print_log
from torch import Tensor, nn

from ..engine.checkpoint import load_checkpoint_file

__all__ = ['WHERE_TO_GET', 'read_checkpoint', 'detect_layout', 'official_to_mmseg',
           'load_pretrained_mit']

WHERE_TO_GET = ('MiT ImageNet-1K weights (mit_b0.pth .. mit_b5.pth) are released by the SegFormer '
                'authors (github.com/NVlabs/SegFormer, README section "Training": '
                '"Download ImageNet-1K pretrained weights"); put the file at that path, '
                'e.g. data/pretrained/mit_b3.pth. Nothing is downloaded at run time.')
MIXER_KEY = re.compile(r'^layers\.(\d+)\.1\.(\d+)\.attn\.(.+)$')


def read_checkpoint(path: str) -> dict[str, Tensor]:
    """Read a local checkpoint file (``.pth`` or ``.safetensors``) with the project's safe loader
    (:func:`afno_seg.engine.checkpoint.load_checkpoint_file`) and return its (unwrapped) state
    dict."""
    if '://' in str(path):
        raise ValueError(f'pretrained checkpoint {path!r} is a URL; afno_seg loads local files '
                         f'only. {WHERE_TO_GET}')
    if not osp.isfile(path):
        raise FileNotFoundError(f'pretrained checkpoint not found: {path!r}. {WHERE_TO_GET}')
    ckpt = load_checkpoint_file(path)  # data only: refuses a pickle that would import code
    for wrapper in ('state_dict', 'model'):
        if isinstance(ckpt, dict) and isinstance(ckpt.get(wrapper), dict):
            ckpt = ckpt[wrapper]
    if not isinstance(ckpt, dict) or not all(isinstance(v, Tensor) for v in ckpt.values()):
        raise ValueError(f'{path!r} does not hold a state dict of tensors')
    return OrderedDict((k[len('module.'):] if k.startswith('module.') else k, v)
                       for k, v in ckpt.items())


def detect_layout(keys) -> str:
    """'official' (SegFormer release) or 'mmseg' (MixVisionTransformer / MixerMiT)."""
    keys = list(keys)
    if any(k.startswith(('patch_embed1.', 'block1.')) for k in keys):
        return 'official'
    if any(k.startswith('layers.') for k in keys):
        return 'mmseg'
    raise ValueError('not a MiT checkpoint: expected keys like "patch_embed1.proj.weight" '
                     f'(official) or "layers.0.0.projection.weight" (mmseg); got {keys[:5]}')


def official_to_mmseg(state_dict: dict[str, Tensor]) -> OrderedDict:
    """Rename an official SegFormer MiT state dict to mmseg's layout (``head.*`` kept as is).

    q and kv Linear weights are concatenated into ``in_proj_*`` (q first, as
    ``nn.MultiheadAttention`` splits them); Mix-FFN Linear weights become 1x1 conv kernels.
    Keys of no known pattern are kept unchanged so that the loader reports them.
    """
    converted = OrderedDict()
    for key, value in state_dict.items():
        m = re.match(r'^(patch_embed|block|norm)(\d+)\.(.*)$', key)
        if m is None:
            converted[key] = value
            continue
        kind, stage, rest = m.group(1), int(m.group(2)) - 1, m.group(3)
        if kind == 'patch_embed':
            converted[f'layers.{stage}.0.{rest.replace("proj.", "projection.", 1)}'] = value
        elif kind == 'norm':
            converted[f'layers.{stage}.2.{rest}'] = value
        else:
            converted.update(_convert_block_key(state_dict, key, f'layers.{stage}.1.', rest, value))
    return converted


def _convert_block_key(state_dict, key, prefix, rest, value) -> dict[str, Tensor]:
    layer, _, name = rest.partition('.')
    out = f'{prefix}{layer}.'
    renames = {'attn.proj.': 'attn.attn.out_proj.', 'attn.sr.': 'attn.sr.',
               'attn.norm.': 'attn.norm.', 'mlp.dwconv.dwconv.': 'ffn.layers.1.',
               'mlp.fc1.': 'ffn.layers.0.', 'mlp.fc2.': 'ffn.layers.4.'}
    if name.startswith('attn.kv.'):
        return {}  # merged into in_proj together with q
    if name.startswith('attn.q.'):
        param = name[len('attn.q.'):]
        kv_key = key.replace('attn.q.', 'attn.kv.')
        if kv_key not in state_dict:
            raise KeyError(f'{key} has no matching {kv_key} in the checkpoint')
        return {f'{out}attn.attn.in_proj_{param}': torch.cat([value, state_dict[kv_key]], dim=0)}
    for old, new in renames.items():
        if name.startswith(old):
            if new in ('ffn.layers.0.', 'ffn.layers.4.') and name.endswith('weight'):
                value = value.reshape(*value.shape, 1, 1)  # Linear -> 1x1 conv
            return {out + new + name[len(old):]: value}
    return {out + name: value}


def _compact(keys) -> str:
    """``layers.2.1.{0..17}.attn.w1`` style summary of many per-layer keys."""
    groups = defaultdict(set)
    for key in keys:
        m = MIXER_KEY.match(key)
        if m:
            groups[(m.group(1), m.group(3))].add(int(m.group(2)))
        else:
            groups[(key, None)].add(-1)
    parts = []
    for (stage, name), layers in sorted(groups.items()):
        if name is None:
            parts.append(stage)
        else:
            parts.append(f'layers.{stage}.1.{{{min(layers)}..{max(layers)}}}.attn.{name}')
    return ', '.join(parts)


def load_pretrained_mit(model: nn.Module, path: str, prefix: str | None = None) -> dict:
    """Load a MiT checkpoint (either layout) into ``model`` under the policy above.

    Args:
        model (nn.Module): A MixerMiT (or mmseg MixVisionTransformer).
        path (str): Local checkpoint file.
        prefix (str, optional): Keep only keys under this prefix and strip it (e.g. 'backbone.'
            for a segmentor checkpoint). Default: None ('backbone.' stripped when no key is a
            backbone key).

    Returns:
        dict: ``layout``, ``loaded``, ``mixer_loaded``, ``mixer_new``, ``unused`` (checkpoint
        mixer keys), ``skipped`` (classifier) key lists.
    """
    state = read_checkpoint(path)
    if prefix is None and not any(k.startswith(('layers.', 'patch_embed', 'block')) for k in state):
        prefix = 'backbone.' if any(k.startswith('backbone.') for k in state) else None
    if prefix:
        state = OrderedDict((k[len(prefix):], v) for k, v in state.items() if k.startswith(prefix))
        if not state:
            raise ValueError(f'{path!r} has no keys under prefix {prefix!r}')
    layout = detect_layout(state)
    if layout == 'official':
        state = official_to_mmseg(state)
    skipped = [k for k in state if k.startswith('head.')]
    own = model.state_dict()
    report = dict(layout=layout, loaded=[], mixer_loaded=[], mixer_new=[], unused=[],
                  skipped=skipped)
    errors, to_load = [], OrderedDict()
    for key, value in state.items():
        if key in skipped:
            continue
        is_mixer = MIXER_KEY.match(key) is not None
        if key in own and own[key].shape == value.shape:
            to_load[key] = value
            report['mixer_loaded' if is_mixer else 'loaded'].append(key)
        elif is_mixer:
            report['unused'].append(key)
        elif key in own:
            errors.append(f'shape mismatch {key}: checkpoint {tuple(value.shape)}, '
                          f'model {tuple(own[key].shape)}')
        else:
            errors.append(f'unexpected key in checkpoint: {key}')
    for key in own:
        if key not in to_load:
            if MIXER_KEY.match(key):
                report['mixer_new'].append(key)
            else:
                errors.append(f'missing in checkpoint: {key}')
    if errors:
        raise RuntimeError(f'{path!r} ({layout} layout) does not fit {type(model).__name__} '
                           f'outside its mixers (wrong arch or wrong file?); {len(errors)} '
                           'problem(s):\n  ' + '\n  '.join(errors))
    model.load_state_dict(to_load, strict=False)
    loaded = len(report['loaded']) + len(report['mixer_loaded'])
    lines = [f'pretrained {path} ({layout} MiT layout): loaded {loaded} of the model\'s {len(own)} '
             f'tensors ({len(report["loaded"])} backbone, {len(report["mixer_loaded"])} mixer), '
             f'skipped {len(skipped) + len(report["unused"])} checkpoint tensors']
    if report['mixer_new']:
        lines.append(f'newly initialised mixer tensors ({len(report["mixer_new"])}): '
                     + _compact(report['mixer_new']))
    if report['unused']:
        lines.append(f'checkpoint attention tensors not used by the mixers '
                     f'({len(report["unused"])}): ' + _compact(report['unused']))
    if skipped:
        lines.append(f'skipped the ImageNet classifier: {", ".join(skipped)}')
    print_log('\n'.join(lines), logger='current', level=logging.INFO)
    return report
