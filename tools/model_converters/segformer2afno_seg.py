"""Convert a published SegFormer (transformers ``SegformerForSemanticSegmentation``, e.g.
``nvidia/segformer-b3-finetuned-cityscapes-1024-1024``) into a checkpoint of afno_seg's config of
the same model (``configs/published/``: MixerMiT with efficient self-attention, ``AllMLPHead``).

Usage::

    hf download nvidia/segformer-b3-finetuned-cityscapes-1024-1024 \
        --local-dir data/pretrained/segformer-b3-cityscapes
    python tools/model_converters/segformer2afno_seg.py data/pretrained/segformer-b3-cityscapes \
        data/pretrained/segformer-b3-cityscapes.pth \
        --config configs/published/segformer_mit-b3_cityscapes-1024x1024.py

SRC is the downloaded folder (``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``)
or the weights file. The encoder is renamed as every MiT file is
(:mod:`afno_seg.backbones.mit_checkpoint`); the decoder: ``decode_head.linear_c.{i}.proj`` ->
``decode_head.linear_c.{i}``, ``linear_fuse`` -> ``linear_fuse.conv``, ``batch_norm`` ->
``linear_fuse.bn``, ``classifier`` -> ``conv_seg`` (transformers 5's module names
``linear_projections`` read too). With ``--config`` the result is loaded into that config's model
and must fit it exactly. The weights keep their owner's licence (NVIDIA's for SegFormer: see the
model card); the output is a plain tensor dict with a ``meta`` naming the source.
"""
import argparse
import json
import os
import os.path as osp
import re
import sys

import torch

import afno_seg  # noqa: F401  (registers the models and the checkpoint loader)
from afno_seg.backbones.mit_checkpoint import detect_layout, mit_state_dict, weights_file
from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP, read_state_dict, trusted_checkpoints

# transformers' decode-head names (both generations) -> AllMLPHead's.
HEAD_RENAMES = [(r'^decode_head\.(?:linear_c|linear_projections)\.(\d+)\.proj\.',
                 r'decode_head.linear_c.\1.'),
                (r'^decode_head\.linear_fuse\.', 'decode_head.linear_fuse.conv.'),
                (r'^decode_head\.batch_norm\.', 'decode_head.linear_fuse.bn.'),
                (r'^decode_head\.classifier\.', 'decode_head.conv_seg.')]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='transformers SegFormer folder (config.json + weights) or '
                        'weights file')
    parser.add_argument('dst', help='output checkpoint (.pth)')
    parser.add_argument('--config', help='check that the result fits this config\'s model')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def convert(state: dict, source: str) -> dict:
    """The segmentor state dict (``backbone.*``, ``decode_head.*``) of a transformers
    SegformerForSemanticSegmentation state dict."""
    if detect_layout(state) != 'transformers' or not any(k.startswith('decode_head.')
                                                         for k in state):
        raise UserError(f'{source} is not a transformers SegformerForSemanticSegmentation '
                        'checkpoint (keys segformer.encoder.* and decode_head.*); for a MiT '
                        'encoder alone use tools/model_converters/mit2afno_seg.py')
    mmseg, _ = mit_state_dict(state)
    out, unknown = {}, []
    for key, value in mmseg.items():
        if key.startswith('layers.'):
            out['backbone.' + key] = value
            continue
        for pattern, new in HEAD_RENAMES:
            if re.match(pattern, key):
                out[re.sub(pattern, new, key)] = value
                break
        else:
            unknown.append(key)
    if unknown:
        raise UserError(f'{source}: keys of no known SegFormer pattern: {", ".join(unknown)}')
    return out


def check_against(config: str, state: dict, name: str) -> str:
    """Build ``config``'s model (no pretrained file) and load ``state`` into it, strictly."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from afno_seg.engine import load_config
    from afno_seg.engine.checkpoint_fit import load_state
    cfg = load_config(config, pretrained=False)
    cfg.model.backbone.init_cfg = None
    init_default_scope('mmseg')
    load_state(MODELS.build(cfg.model), state, name)
    return cfg.filename


def main(argv=None) -> None:
    args = parse_args(argv)
    weights = weights_file(args.src)
    with trusted_checkpoints(args.trust_checkpoint):  # else read as data (safe loader)
        state = convert(read_state_dict(weights), weights)
    meta = dict(source=weights, converted_by='tools/model_converters/segformer2afno_seg.py')
    hf_config = osp.join(osp.dirname(weights), 'config.json')
    if osp.isfile(hf_config):
        with open(hf_config) as f:
            labels = json.load(f).get('id2label') or {}
        meta['classes'] = [labels[k] for k in sorted(labels, key=int)]
    checked = check_against(args.config, state, f'{args.dst} (converted from {weights})') \
        if args.config else None
    os.makedirs(osp.dirname(osp.abspath(args.dst)), exist_ok=True)
    torch.save(dict(state_dict=state, meta=meta), args.dst)
    print(f'{weights}: {len(state)} tensors -> {args.dst}'
          + (f'; fits {checked} exactly' if checked else ''))


if __name__ == '__main__':
    sys.exit(run_tool(main))
