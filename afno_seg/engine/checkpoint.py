"""Local checkpoint loading that works on torch >= 2.6, with a clear error for a bad file.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``, whose restricted unpickler
rejects what mmengine 0.10.7 itself writes into checkpoints (``HistoryBuffer``, numpy scalars in
``message_hub``, config objects), so ``tools/test.py``, ``--resume`` and ``load_from`` all fail.
We register a loader for local paths through mmengine's public ``CheckpointLoader.register_scheme``
(no mmengine source is edited) that loads with ``weights_only=False``, as every torch < 2.6 did.
That unpickles arbitrary objects: load only checkpoints you trust, exactly as with mmengine on older
torch.
"""
import os.path as osp

import torch
from mmengine.runner.checkpoint import CheckpointLoader

from .errors import UserError

__all__ = ['CheckpointError', 'load_local_checkpoint']


class CheckpointError(UserError):
    """A checkpoint file that cannot be read."""


def load_local_checkpoint(filename: str, map_location=None):
    """Load a checkpoint from a local path, naming the file in any error."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise CheckpointError(f'checkpoint file not found: {filename}')
    try:
        return torch.load(filename, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... here
        size = osp.getsize(filename)
        raise CheckpointError(
            f'{filename} ({size} bytes) is not a readable PyTorch checkpoint: '
            f'{type(error).__name__}: {error}. The file is truncated (an interrupted save or '
            'copy) or not a checkpoint at all; pass another one (e.g. an earlier iter_*.pth of '
            'the same work_dir).') from error


CheckpointLoader.register_scheme(prefixes='', loader=load_local_checkpoint, force=True)
