"""Publish a training checkpoint as weights only: a ``.pth`` and a ``.safetensors`` file.

    python tools/publish_model.py CHECKPOINT OUT_DIR [--name NAME] [--trust-checkpoint]

mmseg's convention (its tools/misc/publish_model.py): the optimizer, parameter schedulers,
message hub and RNG state are dropped; ``meta`` keeps the config text, the dataset's classes and
palette and the versions; the file name ends with the first 8 hex digits of the file's sha256
(``NAME-1a2b3c4d.pth``). NAME defaults to the checkpoint's file name without suffix.

- ``NAME-<sha8>.pth``: ``{'state_dict': tensors, 'meta': plain dict}``, loads with plain
  ``torch.load(..., weights_only=True)``, no allowlist needed;
- ``NAME-<sha8>.safetensors``: the same tensors, the meta as JSON in the header
  (``__metadata__['afno_seg.meta']``).

Every tool that takes a checkpoint accepts either. The source checkpoint is read as data (the
project's safe loader); ``--trust-checkpoint`` reads one the loader refuses, for a file you trust.
"""
import argparse
import hashlib
import json
import os
import os.path as osp
import stat
import sys

import torch

import afno_seg  # noqa: F401  (registers modules and the checkpoint loader)
from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint import (
    SAFETENSORS_META_KEY,
    TRUST_FLAG,
    TRUST_HELP,
    load_checkpoint_file,
    state_dict_of,
    trusted_checkpoints,
)

#: meta entries that travel with published weights (mmengine writes more: time, seed, ...).
KEPT_META = ('cfg', 'dataset_meta', 'experiment_name', 'iter', 'epoch', 'mmengine_version',
             'mmseg_version', 'mmpretrain_version')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('checkpoint', help='training checkpoint (e.g. work_dirs/x/iter_160000.pth)')
    parser.add_argument('out_dir', help='folder for NAME-<sha8>.pth and NAME-<sha8>.safetensors')
    parser.add_argument('--name', help='file name stem (default: the checkpoint\'s)')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def _plain(value):
    """JSON-able Python values (tuples as lists, NumPy scalars/arrays as numbers/lists)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, 'tolist')
                                 else str(v)))


def published_meta(meta: dict) -> dict:
    return {key: _plain(meta[key]) for key in KEPT_META if key in (meta or {})}


def _write_hashed(write, out_dir: str, name: str, suffix: str) -> str:
    """Write through ``write(path)`` to a temporary name, then rename to NAME-<sha8>.suffix."""
    temporary = osp.join(out_dir, f'.{name}.tmp{suffix}')
    write(temporary)
    digest = hashlib.sha256()
    with open(temporary, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    final = osp.join(out_dir, f'{name}-{digest.hexdigest()[:8]}{suffix}')
    os.replace(temporary, final)
    return final


def publish(checkpoint: str, out_dir: str, name: str | None = None) -> tuple[str, str]:
    """Write the weights-only ``.pth`` and ``.safetensors`` of ``checkpoint``; return the paths."""
    from safetensors.torch import save_file
    loaded = load_checkpoint_file(checkpoint, map_location='cpu')
    state = state_dict_of(loaded)
    if not state:
        raise UserError(f'{checkpoint} holds no tensors: nothing to publish')
    meta = published_meta(loaded.get('meta', {}) if isinstance(loaded, dict) else {})
    name = name or osp.splitext(osp.basename(checkpoint))[0]
    os.makedirs(out_dir, exist_ok=True)
    # Own, contiguous storage per tensor: safetensors refuses shared or strided views.
    tensors = {key: value.detach().contiguous().clone() for key, value in state.items()}
    pth = _write_hashed(lambda path: torch.save(dict(state_dict=tensors, meta=meta), path),
                        out_dir, name, '.pth')
    safetensors = _write_hashed(
        lambda path: save_file(tensors, path, metadata={'format': 'pt',
                                                        SAFETENSORS_META_KEY: json.dumps(meta)}),
        out_dir, name, '.safetensors')
    # safetensors creates its file 0600; published weights are read by others as the .pth is
    os.chmod(safetensors, stat.S_IMODE(os.stat(pth).st_mode))
    return pth, safetensors


def main(argv=None) -> None:
    args = parse_args(argv)
    with trusted_checkpoints(args.trust_checkpoint):
        pth, safetensors = publish(args.checkpoint, args.out_dir, args.name)
    print(f'{args.checkpoint} -> {pth} and {safetensors} (weights and meta only)')


if __name__ == '__main__':
    sys.exit(run_tool(main))
