"""Convert an official SegFormer MiT checkpoint (``mit_b3.pth``) to mmseg's / afno_seg's layout.

Usage::

    python tools/model_converters/mit2afno_seg.py data/pretrained/mit_b3.pth \
        data/pretrained/mit_b3_mmseg.pth

Not required for training: :class:`~afno_seg.backbones.MixerMiT` detects the official layout and
converts it on load. Converting once offline gives a file that mmseg's own MixVisionTransformer
also loads, and shows the key mapping (``--verbose``). The ImageNet classifier ``head.*`` is
dropped. The source is read as data (``.pth`` or ``.safetensors``; a pickle that would import
code is refused unless ``--trust-checkpoint``); the output is a plain tensor dict.

Renaming: ``patch_embed{s}.proj`` -> ``layers.{s-1}.0.projection``,
``block{s}.{j}.attn.{q,kv}`` -> ``layers.{s-1}.1.{j}.attn.attn.in_proj_*`` (q and kv
concatenated), ``attn.proj`` -> ``attn.attn.out_proj``, ``mlp.fc1/dwconv.dwconv/fc2`` ->
``ffn.layers.0/1/4`` (Linear weights as 1x1 convs), ``norm{s}`` -> ``layers.{s-1}.2``.
"""
import argparse
import os
import os.path as osp
import sys

import torch

from afno_seg.backbones.mit_checkpoint import detect_layout, official_to_mmseg
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP, read_state_dict, trusted_checkpoints
from afno_seg.engine.errors import UserError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='official SegFormer MiT checkpoint (e.g. mit_b3.pth)')
    parser.add_argument('dst', help='output path (mmseg layout)')
    parser.add_argument('--verbose', action='store_true', help='print every converted key')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        with trusted_checkpoints(args.trust_checkpoint):  # else read as data (safe loader)
            state = read_state_dict(args.src)
        layout = detect_layout(state)
    except (FileNotFoundError, ValueError, UserError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    if layout != 'official':
        print(f'error: {args.src} is already in the {layout} layout; nothing to convert',
              file=sys.stderr)
        return 1
    converted = official_to_mmseg(state)
    dropped = [k for k in converted if k.startswith('head.')]
    for key in dropped:
        del converted[key]
    unknown = [k for k in converted if not k.startswith('layers.')]
    if unknown:
        print(f'error: keys of no known MiT pattern: {unknown}', file=sys.stderr)
        return 1
    if args.verbose:
        for key, value in converted.items():
            print(f'{key:60s} {tuple(value.shape)}')
    os.makedirs(osp.dirname(osp.abspath(args.dst)), exist_ok=True)
    torch.save(converted, args.dst)
    print(f'{args.src}: {len(state)} tensors (official) -> {args.dst}: {len(converted)} tensors '
          f'(mmseg layout); dropped the classifier: {", ".join(dropped) or "none"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
