"""Checkpoints are read as data, never run as code (mmengine's loader unpickles anything, torch's
``weights_only`` refuses mmengine's): one reader, every prefix; ``--trust-checkpoint``: opt out."""
import contextlib
import json
import logging
import os
import os.path as osp
import pkgutil
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import torch
from mmengine.dist import barrier, get_dist_info
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner import CheckpointLoader
from torch import Tensor
from torch.hub import download_url_to_file, get_dir
from torch.serialization import get_unsafe_globals_in_checkpoint, safe_globals

from .errors import UserError

__all__ = ['CheckpointError', 'TRUST_FLAG', 'UnsafeCheckpointError',
           'load_checkpoint_file', 'read_state_dict', 'state_dict_of', 'trusted_checkpoints']

TRUST_FLAG = '--trust-checkpoint'
TRUST_HELP = ('load checkpoint files as full pickles (may run code they contain); only for a file '
              'you trust that the safe loader refuses')
SAFETENSORS_META_KEY = 'afno_seg.meta'  # the JSON-encoded ``meta`` in a .safetensors header

_trusted = False  # inside trusted_checkpoints(True): the one command's opt-in


class CheckpointError(UserError):
    """A checkpoint file that cannot be read."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose pickle needs a global outside the allowlist."""


def _history_buffer_getattr(owner, name: str):
    """``builtins.getattr`` for ``HistoryBuffer``'s pickled statistics methods, nothing else."""
    if owner is not HistoryBuffer or name not in ('current', 'max', 'mean', 'min'):
        raise UnsafeCheckpointError(f'builtins.getattr({owner!r}, {name!r})')
    return getattr(HistoryBuffer, name)


# What mmengine 0.10.7, mmseg, mmpretrain and our ``rng_state`` need beyond torch's allowlist, NumPy
# 1 and 2 names (a NumPy 2 dtype is an instance of its class: every fixed-size numeric and bool).
_ALLOWLIST = [
    (_history_buffer_getattr, 'builtins.getattr'), HistoryBuffer, np.ndarray, np.dtype,
    *(getattr(np.dtypes, f'{kind}DType') for kind in (
        'Bool', 'Float16', 'Float32', 'Float64', 'Int8', 'Int16', 'Int32', 'Int64', 'UInt8',
        'UInt16', 'UInt32', 'UInt64')),
    *((pkgutil.resolve_name(f'numpy:_core.multiarray.{name}'), f'numpy.{core}.multiarray.{name}')
      for core in ('core', '_core') for name in ('_reconstruct', 'scalar'))]


@contextlib.contextmanager
def trusted_checkpoints(trust: bool = True) -> Iterator[None]:
    """Within the block, read checkpoints as full pickles if ``trust`` (``--trust-checkpoint``)."""
    global _trusted
    previous, _trusted = _trusted, bool(trust) or _trusted
    try:
        yield
    finally:
        _trusted = previous


def _download(url: str) -> str:
    """The copy of ``url`` in torch.hub's cache, where mmengine's ``load_from_http`` keeps it;
    fetched if missing, by rank 0 first, then by any rank whose node does not share that cache."""
    cached = osp.join(get_dir(), 'checkpoints', osp.basename(urlparse(url).path))
    rank, world_size = get_dist_info()
    if rank > 0:
        barrier()  # the one rank 0 enters after its download
    try:
        if not osp.isfile(cached):
            os.makedirs(osp.dirname(cached), exist_ok=True)
            download_url_to_file(url, cached, progress=False)
    except Exception as error:  # noqa: BLE001  (URLError, HTTPError, OSError: one line)
        raise CheckpointError(f'could not download checkpoint {url}: {type(error).__name__}: '
                              f'{error}; download it where you can and pass its path') from None
    finally:
        if rank == 0 and world_size > 1:
            barrier()
    return cached


def local_checkpoint_file(filename: str) -> str:
    """The local file a checkpoint argument stands for: what a folder's or a ``last_checkpoint``
    file names (as ``--resume`` reads it), an http(s) URL's download, an existing path."""
    path = osp.expanduser(str(filename))
    if osp.isdir(path):
        path = osp.join(path, 'last_checkpoint')
    if osp.basename(path) == 'last_checkpoint':
        named = Path(path).read_text(errors='replace').strip() if osp.isfile(path) else ''
        if not named:
            raise CheckpointError(f'{filename}: {path} is missing or empty; pass a checkpoint '
                                  'file (e.g. the latest iter_N.pth)')
        relative = '://' not in named and not osp.isabs(named) and not osp.exists(named)
        path = osp.join(osp.dirname(path), named) if relative else osp.expanduser(named)
    if path.startswith(('http://', 'https://')):
        return _download(path)
    if '://' in path:  # mmengine's name tables, pavi, s3, petrel, ...
        raise CheckpointError(f'{path}: afno_seg reads checkpoints from local files and http(s) '
                              'URLs only; download it and pass its path')
    if not osp.isfile(path):
        raise CheckpointError(f'checkpoint file not found: {path}')
    return path


def load_checkpoint_file(filename: str, map_location='cpu') -> dict:
    """A ``.pth`` (mmengine's dict or a state dict) or ``.safetensors`` (``dict(state_dict=,
    meta=)``) read as data; :class:`UnsafeCheckpointError` for a global outside the allowlist."""
    path = local_checkpoint_file(filename)
    try:
        if path.lower().endswith('.safetensors'):
            from safetensors import safe_open  # pinned in requirements.txt; maps lazily anyway
            with safe_open(path, framework='pt', device='cpu') as handle:
                meta = json.loads((handle.metadata() or {}).get(SAFETENSORS_META_KEY, '{}'))
                return dict(state_dict=handle.get_tensors(), meta=meta)
        if _trusted:
            print_log(f'{TRUST_FLAG}: loading {filename} as a full pickle (not checked for code)',
                      logger='current', level=logging.WARNING)
            return torch.load(path, map_location=map_location, weights_only=False)
        with safe_globals(_ALLOWLIST):
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001  (what a damaged file raises varies)
        unsafe = [str(error)] if isinstance(error, UnsafeCheckpointError) else []  # getattr guard
        if not (unsafe or _trusted):  # the globals torch lists without unpickling (if it can)
            with safe_globals(_ALLOWLIST), contextlib.suppress(Exception):
                unsafe = sorted(get_unsafe_globals_in_checkpoint(path))
        if unsafe:
            raise UnsafeCheckpointError(f'refused checkpoint {filename}: reading it needs '
                                        f'{", ".join(unsafe)}, which weights never need (it could '
                                        f'run code); if you trust the file, run again with '
                                        f'{TRUST_FLAG}') from None
        kind = 'safetensors file' if path.lower().endswith('.safetensors') else 'PyTorch checkpoint'
        raise CheckpointError(f'{filename} ({osp.getsize(path)} bytes) is not a readable {kind} '
                              f'({type(error).__name__}): damaged or not a checkpoint; pass '
                              'another (e.g. an earlier iter_*.pth)') from error


def state_dict_of(checkpoint, prefix: str | None = None) -> 'OrderedDict[str, Tensor]':
    """The tensors of a checkpoint's state dict: the ``state_dict``/``model`` wrapper and DDP's
    ``module.`` removed; with ``prefix`` (e.g. ``'backbone.'``) the keys under it, stripped."""
    if isinstance(checkpoint, dict):
        checkpoint = next((checkpoint[key] for key in ('state_dict', 'model')
                           if isinstance(checkpoint.get(key), dict)), checkpoint)
    if not isinstance(checkpoint, dict):
        return OrderedDict()
    state = ((k.removeprefix('module.'), v) for k, v in checkpoint.items() if isinstance(v, Tensor))
    prefix = prefix or ''
    return OrderedDict((k[len(prefix):], v) for k, v in state if k.startswith(prefix))


def read_state_dict(filename: str, prefix: str | None = None) -> 'OrderedDict[str, Tensor]':
    """:func:`state_dict_of` the file, read once by :func:`load_checkpoint_file`."""
    return state_dict_of(load_checkpoint_file(filename), prefix)


def without_config_text(checkpoint):
    """``checkpoint`` with the config text mmengine executes (``Runner.resume``, ``BaseInferencer``)
    moved to ``meta['config_text']``, a string nothing runs; in place."""
    if not isinstance(checkpoint, dict):
        return checkpoint
    meta, hub = checkpoint.get('meta'), checkpoint.get('message_hub')
    for holder in (meta, hub.get('runtime_info') if isinstance(hub, dict) else None):
        for key in ('config', 'cfg') if isinstance(holder, dict) else ():
            text = holder.pop(key, None)
            if isinstance(meta, dict) and isinstance(text, str):
                meta.setdefault('config_text', text)
    return checkpoint


def load_from_safe_loader(filename: str, map_location=None, *args, **kwargs) -> dict:
    """mmengine's ``CheckpointLoader`` for every prefix: the file read, config text set aside."""
    return without_config_text(load_checkpoint_file(filename, map_location or 'cpu'))


# Every prefix mmengine 0.10.7 registers; all but http(s) refused by local_checkpoint_file.
for _prefix in ('', 'http://', 'https://', 'torchvision://', 'modelzoo://', 'open-mmlab://',
                'openmmlab://', 'mmcls://', 'pavi://', r'(\S+\:)?s3://', r'(\S+\:)?petrel://'):
    CheckpointLoader.register_scheme(_prefix, load_from_safe_loader, force=True)
