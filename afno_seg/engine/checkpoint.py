"""Checkpoints are data, never code: the one loader behind every checkpoint read of the project.

A ``.pth`` file is a pickle, and a pickle can call any function while it is read.
:func:`load_checkpoint_file` reads it with ``torch.load(weights_only=True)`` plus, scoped to that
call, exactly the globals that mmengine 0.10.7, mmseg and mmpretrain write into checkpoints
(:data:`ALLOWED_GLOBALS`: found by listing ``get_unsafe_globals_in_checkpoint`` of real training
checkpoints; each only rebuilds data; torch's global allowlist is never changed); a
``.safetensors`` file holds tensors only, its ``meta`` dict is JSON in the header. A file that
needs any other global is refused in one line naming it, the global and the opt-in:
``--trust-checkpoint`` on a tool enters :func:`trusted_checkpoints`, under which files load as
full pickles, each with a warning. A URL of a scheme mmengine serves (``http(s)://``,
``torchvision://``, ``open-mmlab://``, ``mmcls://``) is downloaded where mmengine would put it
(torch.hub's cache) and that file read the same way; other schemes are refused. A folder or a
``last_checkpoint`` file stands for the checkpoint it names. Importing the package registers
:func:`load_from_safe_loader` (the same reader, config text set aside: mmengine's
``Runner.resume`` and ``BaseInferencer`` execute ``meta['config']`` / ``meta['cfg']``) with
mmengine's ``CheckpointLoader.register_scheme`` for every prefix it knows, so the Runner's
``load_from``/``resume``, ``init_cfg`` and mmseg's ``init_model``/``MMSegInferencer`` use it
(docs/security.md).
"""
import contextlib
import json
import logging
import os
import os.path as osp
import pickle
import pkgutil
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator

import torch
from mmengine.dist import barrier, get_dist_info
from mmengine.logging import print_log
from mmengine.runner import (
    CheckpointLoader,
    get_deprecated_model_names,
    get_external_models,
    get_mmcls_models,
    get_torchvision_models,
)
from torch import Tensor

from .errors import UserError

__all__ = ['ALLOWED_GLOBALS', 'CheckpointError', 'SAFETENSORS_META_KEY', 'TRUST_FLAG',
           'TRUST_HELP', 'URL_PREFIXES', 'UnsafeCheckpointError', 'check_checkpoint_file',
           'load_checkpoint_file', 'load_from_safe_loader', 'local_checkpoint_file',
           'read_state_dict', 'resolve_checkpoint', 'state_dict_of', 'trusted_checkpoints',
           'without_config_text']

TRUST_FLAG = '--trust-checkpoint'
#: Key of the JSON-encoded ``meta`` dict in a ``.safetensors`` header's ``__metadata__``.
SAFETENSORS_META_KEY = 'afno_seg.meta'

#: Pickled name -> where the object lives now. Exactly what mmengine 0.10.7 (``message_hub``:
#: ``HistoryBuffer`` holding NumPy arrays and scalars), mmseg and mmpretrain checkpoints (and our
#: ``rng_state``: NumPy's generator state, an ``ndarray``) need beyond torch's own allowlist.
#: NumPy 2 pickles ``numpy._core``; files written under NumPy 1 name ``numpy.core``.
ALLOWED_GLOBALS = {
    'mmengine.logging.history_buffer.HistoryBuffer':
        'mmengine.logging.history_buffer:HistoryBuffer',
    'numpy._core.multiarray._reconstruct': 'numpy:_core.multiarray._reconstruct',
    'numpy.core.multiarray._reconstruct': 'numpy:_core.multiarray._reconstruct',
    'numpy._core.multiarray.scalar': 'numpy:_core.multiarray.scalar',
    'numpy.core.multiarray.scalar': 'numpy:_core.multiarray.scalar',
    'numpy.ndarray': 'numpy:ndarray',
    'numpy.dtype': 'numpy:dtype',
}
# NumPy 2 rebuilds a dtype as an instance of its class (numpy.dtypes.Float64DType, ...), which
# the restricted unpickler must be allowed to BUILD (they are not GLOBALs of the pickle, so
# get_unsafe_globals_in_checkpoint does not list them). A tiny training run's checkpoint holds
# Float64 and Int64 (logged scalars) and UInt32 (NumPy's RNG state); which scalars a run logs
# depends on its metrics, so every fixed-size numeric and the bool dtype class is allowed.
ALLOWED_GLOBALS.update({f'numpy.dtypes.{kind}DType': f'numpy:dtypes.{kind}DType' for kind in (
    'Bool', 'Float16', 'Float32', 'Float64', 'Int8', 'Int16', 'Int32', 'Int64', 'UInt8',
    'UInt16', 'UInt32', 'UInt64')})

#: ``HistoryBuffer`` pickles its statistics methods as ``getattr(HistoryBuffer, 'mean')``
#: (protocol 2 has no name for a method). ``builtins.getattr`` itself would hand the pickle any
#: attribute of any allowed object, so the name is bound to :func:`_history_buffer_method`.
HISTORY_BUFFER_METHODS = ('current', 'max', 'mean', 'min')


def _history_buffer_method(owner, name: str):
    """The ``getattr`` a checkpoint may call: one of HistoryBuffer's own statistics methods."""
    from mmengine.logging import HistoryBuffer
    if owner is not HistoryBuffer or name not in HISTORY_BUFFER_METHODS:
        raise pickle.UnpicklingError(
            f'Unsupported global: GLOBAL builtins.getattr on {owner!r}, {name!r} (only '
            f'HistoryBuffer.{"/".join(HISTORY_BUFFER_METHODS)} are allowed)')
    return getattr(HistoryBuffer, name)


_GLOBAL_IN_ERROR = re.compile(r'GLOBAL (\S+)')
# What torch's restricted unpickler says about a pickle that asks for more than data: a global
# outside the allowlist or a call/object of one. ('Unsupported operand' is what random bytes
# give too: a damaged file, reported as unreadable, and not loaded either.)
_UNSAFE_MARKERS = ('GLOBAL ', 'unrecognized function', 'Can only create new object',
                   'Can only build')
_trusted = False  # inside trusted_checkpoints(True): the one command's opt-in


class CheckpointError(UserError):
    """A checkpoint file that cannot be read."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose pickle needs a global outside :data:`ALLOWED_GLOBALS`."""


def _allowlist() -> list[tuple[Callable, str]]:
    """``(object, pickled name)`` pairs for ``torch.serialization.safe_globals``."""
    pairs = [(_history_buffer_method, 'builtins.getattr')]
    for name, target in ALLOWED_GLOBALS.items():
        with contextlib.suppress(AttributeError):  # e.g. a dtype class this NumPy does not have
            pairs.append((pkgutil.resolve_name(target), name))
    return pairs


@contextlib.contextmanager
def trusted_checkpoints(trust: bool = True) -> Iterator[None]:
    """Within the block (one command), load checkpoints with ``weights_only=False`` when
    ``trust``: what a tool's ``--trust-checkpoint`` does. Restores the previous state on exit."""
    global _trusted
    previous, _trusted = _trusted, bool(trust) or _trusted
    try:
        yield
    finally:
        _trusted = previous


# The tools declare the flag themselves (the library has no command line); they share its help.
TRUST_HELP = ('load checkpoint files as full pickles (may run code they contain); only for a file '
              'you trust that the safe loader refuses')


def is_safetensors(filename: str) -> bool:
    return str(filename).lower().endswith('.safetensors')


def resolve_checkpoint(filename: str) -> str:
    """The file ``filename`` stands for: a ``last_checkpoint`` file (or a folder holding one,
    e.g. a work_dir) names the checkpoint, as ``--resume`` reads it; anything else as it is."""
    path = osp.expanduser(str(filename))
    if osp.isdir(path):
        if not osp.isfile(osp.join(path, 'last_checkpoint')):
            raise CheckpointError(f'{filename} is a folder without a last_checkpoint file: pass '
                                  'a checkpoint file in it (e.g. its latest iter_N.pth)')
        path = osp.join(path, 'last_checkpoint')
    if osp.basename(path) != 'last_checkpoint' or not osp.isfile(path):
        return str(filename)
    with open(path, encoding='utf-8', errors='replace') as file:
        named = file.read().strip()
    if not named:
        raise CheckpointError(f'{path} is empty: it names no checkpoint; pass a checkpoint file')
    if '://' in named or osp.isabs(named) or osp.exists(named):
        return named
    return osp.join(osp.dirname(path), named)  # written relative to its work_dir


# Where mmengine 0.10.7 sends each URL prefix it registers; we fetch the same file, never unpickle
# it there. A name -> URL table is one of mmengine's public ``get_*_models`` functions.
_URL_TABLES = {'torchvision://': get_torchvision_models, 'modelzoo://': get_torchvision_models,
               'open-mmlab://': get_external_models, 'openmmlab://': get_external_models,
               'mmcls://': get_mmcls_models}
URL_PREFIXES = ('http://', 'https://', *_URL_TABLES)


def _download(url: str) -> str:
    """The local copy of ``url`` where mmengine's ``load_from_http`` (torch.hub's
    ``load_state_dict_from_url``) keeps it, downloaded if missing: rank 0 first, as mmengine does,
    so the ranks of a job fetch it once."""
    from urllib.parse import urlparse

    from torch.hub import download_url_to_file, get_dir
    cached = osp.join(get_dir(), 'checkpoints', osp.basename(urlparse(url).path))

    def fetch() -> None:
        if osp.isfile(cached):
            return
        try:
            os.makedirs(osp.dirname(cached), exist_ok=True)
            download_url_to_file(url, cached, progress=False)
        except Exception as error:  # noqa: BLE001  (URLError, HTTPError, OSError: one line)
            raise CheckpointError(
                f'could not download checkpoint {url}: {type(error).__name__}: {error}; '
                'download it where you can and pass the file\'s path') from None

    rank, world_size = get_dist_info()
    if rank == 0:
        fetch()
    if world_size > 1:
        barrier()
        if rank > 0:
            fetch()  # a node of its own (a cache not shared with rank 0's)
    return cached


def local_checkpoint_file(filename: str) -> str:
    """The local path of a checkpoint argument: a URL of :data:`URL_PREFIXES` downloaded
    (:func:`_download`), other URLs refused, a local path checked to exist."""
    filename = resolve_checkpoint(filename)
    if '://' not in str(filename):
        path = osp.expanduser(str(filename))
        if not osp.isfile(path):
            raise CheckpointError(f'checkpoint file not found: {filename}')
        return path
    prefix = next((p for p in URL_PREFIXES if filename.startswith(p)), None)
    if prefix is None:
        raise CheckpointError(f'{filename}: afno_seg reads checkpoints from local files and '
                              f'{", ".join(URL_PREFIXES)} URLs only; download it and pass its path')
    url = filename
    if prefix in _URL_TABLES:
        name = filename[len(prefix):]
        try:
            if 'mmlab://' in prefix:  # renamed models, as mmengine follows them
                name = get_deprecated_model_names().get(name, name)
            url = _URL_TABLES[prefix]().get(name)
        except Exception as error:  # noqa: BLE001  (e.g. torchvision:// without torchvision)
            raise CheckpointError(f'{filename}: cannot look the name up ({error})') from None
        if url is None:
            raise CheckpointError(f'{filename}: mmengine knows no checkpoint named {name!r}')
        if '://' not in url:  # open-mmlab's table may name a file under mmengine's home
            home = os.getenv('MMENGINE_HOME', osp.join(os.getenv('XDG_CACHE_HOME', '~/.cache'),
                                                        'mmengine'))  # mmengine's rule
            return local_checkpoint_file(osp.join(osp.expanduser(home), url))
    return _download(url)


def _torch_reason(error: Exception) -> str:
    """torch's reason, without its advice to load with ``weights_only=False`` and to file an
    issue (the advice our messages give is our own: ``--trust-checkpoint``)."""
    text = str(error)
    if 'WeightsUnpickler error:' in text or 'weights_only' in text:
        text = text.split('WeightsUnpickler error:')[-1].split('Check the documentation')[0]
    return ' '.join(text.split())


def _refusal(filename: str, error: Exception) -> UnsafeCheckpointError:
    match = _GLOBAL_IN_ERROR.search(str(error))
    if match:
        needs = f'would import {match.group(1)} while being read'
    else:
        needs = f'needs more than tensors and plain data to be read ({_torch_reason(error)})'
    return UnsafeCheckpointError(
        f'refused checkpoint {filename}: it {needs}, which a checkpoint of weights never '
        f'needs (loading it could run code). If you trust this file and its source, run the '
        f'command again with {TRUST_FLAG}; or publish it as weights only '
        '(tools/publish_model.py) from a trusted machine.')


def _unreadable(filename: str, path: str, error: Exception) -> CheckpointError:
    size = osp.getsize(path)
    kind = 'safetensors file' if is_safetensors(path) else 'PyTorch checkpoint'
    return CheckpointError(
        f'{filename} ({size} bytes) is not a readable {kind}: '
        f'{type(error).__name__}: {_torch_reason(error)}. The file is truncated (an interrupted '
        'save or copy) or not a checkpoint at all; pass another one (e.g. an earlier iter_*.pth '
        'of the same work_dir).')


def _load_safetensors(path: str, filename: str, map_location) -> dict:
    from safetensors import safe_open  # pinned in requirements.txt
    device = map_location if isinstance(map_location, str) else 'cpu'
    try:
        with safe_open(path, framework='pt', device=device) as handle:
            header = handle.metadata() or {}
            state_dict = handle.get_tensors()
        meta = json.loads(header[SAFETENSORS_META_KEY]) if SAFETENSORS_META_KEY in header else {}
    except Exception as error:  # noqa: BLE001  (SafetensorError, JSON, OS errors: one message)
        raise _unreadable(filename, path, error) from error
    return dict(state_dict=state_dict, meta=meta)


def load_checkpoint_file(filename: str, map_location='cpu', mmap: bool = False) -> dict:
    """Read a ``.pth`` or ``.safetensors`` checkpoint as data (a local file, a URL of
    :data:`URL_PREFIXES`, or what :func:`resolve_checkpoint` resolves): the unpickled object
    (mmengine's checkpoint dict, or a bare state dict), for ``.safetensors``
    ``dict(state_dict=tensors, meta=header meta or {})``. ``map_location`` as ``torch.load``'s;
    ``mmap``: read the archive index and the pickled structure, not the tensor data.

    Raises:
        UnsafeCheckpointError: the pickle needs a global outside :data:`ALLOWED_GLOBALS`
            (unless inside :func:`trusted_checkpoints`).
        CheckpointError: no such file, not a readable checkpoint, a URL that cannot be fetched.
    """
    path = local_checkpoint_file(filename)
    if is_safetensors(path):  # safetensors maps the file lazily anyway
        return _load_safetensors(path, filename, map_location)
    try:
        if _trusted:
            print_log(f'{TRUST_FLAG}: loading {filename} as a full pickle (not checked for code)',
                      logger='current', level=logging.WARNING)
            return torch.load(path, map_location=map_location, weights_only=False)
        with torch.serialization.safe_globals(_allowlist()):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as error:  # noqa: BLE001  RuntimeError, EOFError, ... of a broken file
        if (isinstance(error, pickle.UnpicklingError) and not _trusted
                and any(marker in str(error) for marker in _UNSAFE_MARKERS)):
            raise _refusal(filename, error) from None
        if mmap:  # e.g. torch's legacy non-zip format cannot be mapped: the full load decides
            return load_checkpoint_file(filename, map_location)
        raise _unreadable(filename, path, error) from error


def check_checkpoint_file(filename: str) -> None:
    """Raise :class:`CheckpointError` (or :class:`UnsafeCheckpointError`) unless ``filename``
    loads with :func:`load_checkpoint_file`; cheap for a good file (memory-mapped, or the
    header of a ``.safetensors`` file). Under :func:`trusted_checkpoints` only that it exists."""
    if _trusted:
        local_checkpoint_file(filename)
    else:
        load_checkpoint_file(filename, mmap=True)


def state_dict_of(checkpoint, prefix: str | None = None) -> 'OrderedDict[str, Tensor]':
    """The state dict inside a checkpoint: the ``state_dict``/``model`` wrapper and DDP's
    ``module.`` prefix removed, non-tensor entries left out; with ``prefix``, the keys under it,
    stripped (``'backbone.'``: a segmentor's or classifier's backbone)."""
    state = checkpoint
    for wrapper in ('state_dict', 'model'):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict):
        return OrderedDict()
    state = OrderedDict((k.removeprefix('module.'), v) for k, v in state.items()
                        if isinstance(v, Tensor))
    if prefix:
        state = OrderedDict((k[len(prefix):], v) for k, v in state.items() if k.startswith(prefix))
    return state


def read_state_dict(filename: str, prefix: str | None = None) -> 'OrderedDict[str, Tensor]':
    """:func:`state_dict_of` the file read by :func:`load_checkpoint_file`."""
    return state_dict_of(load_checkpoint_file(filename), prefix)


#: ``meta`` keys and ``message_hub['runtime_info']`` keys holding config text that mmengine
#: executes: ``Runner.resume`` runs ``Config.fromstring(meta['config'])``, ``BaseInferencer``
#: with ``model=None`` the ``cfg`` of either place.
CONFIG_TEXT_KEYS = ('config', 'cfg')
#: Where :func:`without_config_text` keeps the text (read only as text, e.g. to name mixers).
CONFIG_TEXT_KEPT = 'config_text'


def without_config_text(checkpoint):
    """``checkpoint`` with the config text mmengine would execute moved to
    ``meta['config_text']`` (a plain string nothing runs); in place, returned."""
    if not isinstance(checkpoint, dict):
        return checkpoint
    meta = checkpoint.get('meta')
    info = (checkpoint.get('message_hub') or {}).get('runtime_info') \
        if isinstance(checkpoint.get('message_hub'), dict) else None
    for holder in (meta, info):
        for key in CONFIG_TEXT_KEYS if isinstance(holder, dict) else ():
            text = holder.pop(key, None)
            if isinstance(meta, dict) and isinstance(text, str):
                meta.setdefault(CONFIG_TEXT_KEPT, text)
    return checkpoint


def load_from_safe_loader(filename: str, map_location=None, *args, **kwargs) -> dict:
    """What mmengine's ``CheckpointLoader`` calls for every prefix (its log line names the loader
    by what follows ``load_from_``: "safe_loader"): :func:`load_checkpoint_file`
    then :func:`without_config_text` (also under ``--trust-checkpoint``); ``mmcls://`` gives
    the backbone's state dict, as mmengine's own loader does."""
    checkpoint = without_config_text(load_checkpoint_file(filename, map_location or 'cpu'))
    if str(filename).startswith('mmcls://'):
        state = state_dict_of(checkpoint, 'backbone.')
        checkpoint = dict(state_dict=state)
    return checkpoint


# mmengine's other prefixes (pavi, Ceph/S3/petrel): refused by local_checkpoint_file, one line.
for _prefix in ('', *URL_PREFIXES, 'pavi://', r'(\S+\:)?s3://', r'(\S+\:)?petrel://'):
    CheckpointLoader.register_scheme(prefixes=_prefix, loader=load_from_safe_loader, force=True)
