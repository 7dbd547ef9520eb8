"""Convert a MiT checkpoint (the SegFormer authors' ``mit_b3.pth`` or a transformers
``nvidia/mit-b3`` download) to mmseg's / afno_seg's layout.

Usage::

    hf download nvidia/mit-b3 --local-dir data/pretrained/mit-b3
    python tools/model_converters/mit2afno_seg.py data/pretrained/mit-b3 \
        data/pretrained/mit_b3.pth

Not required for training: :class:`~afno_seg.backbones.MixerMiT` detects every layout and
converts it on load (a transformers folder too). Converting once offline gives the file the
configs name by default (``data/pretrained/mit_b3.pth``), which mmseg's own MixVisionTransformer
also loads, and shows the key mapping (``--verbose``). The ImageNet classifier (``head.*``,
``classifier.*``) and a decode head are dropped. The source is read as data (``.pth``,
``.bin`` or ``.safetensors``; a pickle that would import code is refused unless
``--trust-checkpoint``); the output is a plain tensor dict.

Renaming (transformers names go to the official ones first, ``kv`` = cat(key, value)):
``patch_embed{s}.proj`` -> ``layers.{s-1}.0.projection``,
``block{s}.{j}.attn.{q,kv}`` -> ``layers.{s-1}.1.{j}.attn.attn.in_proj_*`` (q and kv
concatenated), ``attn.proj`` -> ``attn.attn.out_proj``, ``mlp.fc1/dwconv.dwconv/fc2`` ->
``ffn.layers.0/1/4`` (Linear weights as 1x1 convs), ``norm{s}`` -> ``layers.{s-1}.2``.
"""
import argparse
import os
import os.path as osp
import sys

import torch

from afno_seg.backbones.mit_checkpoint import mit_state_dict, weights_file
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP, read_state_dict, trusted_checkpoints
from afno_seg.engine.errors import UserError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='MiT checkpoint (e.g. mit_b3.pth) or transformers folder')
    parser.add_argument('dst', help='output path (mmseg layout)')
    parser.add_argument('--verbose', action='store_true', help='print every converted key')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        weights = weights_file(args.src)
        with trusted_checkpoints(args.trust_checkpoint):  # else read as data (safe loader)
            state = read_state_dict(weights)
        converted, layout = mit_state_dict(state, prefix='')
    except (FileNotFoundError, ValueError, UserError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    if layout == 'mmseg':
        print(f'error: {args.src} is already in the mmseg layout; nothing to convert',
              file=sys.stderr)
        return 1
    dropped = [k for k in converted if k.startswith(('head.', 'classifier.', 'decode_head.'))]
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
    print(f'{weights}: {len(state)} tensors ({layout}) -> {args.dst}: {len(converted)} tensors '
          f'(mmseg layout); dropped: {", ".join(dropped) or "none"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
