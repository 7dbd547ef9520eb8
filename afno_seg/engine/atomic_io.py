"""Atomic local file writes, so a killed or failed save never leaves a partial checkpoint.

mmengine 0.10.7 saves a checkpoint by ``torch.save`` into memory and then
``get_file_backend(path).put(bytes, path)``; for a local path that is ``LocalBackend.put``, an
``open(path, 'wb')`` + ``write``. A job killed during that write (pre-emption, OOM killer, a
wall-clock limit) leaves a truncated ``iter_N.pth`` under the final name, and a full disk does
the same; ``--resume`` then fails on it, or worse, an older complete checkpoint was already
deleted to make room for it.

:class:`AtomicLocalBackend` replaces mmengine's local backend (through the public
``mmengine.fileio.register_backend(..., force=True)``, on import of :mod:`afno_seg`) with one
whose ``put``/``put_text`` write the classic way:

1. write a hidden temporary file in the destination folder (same file system, so step 3 is a
   rename, not a copy): ``.<name>.<pid>.<8 hex>.tmp``;
2. ``flush`` and ``fsync`` it, so its bytes are on disk before the name can point to it;
3. ``os.replace`` it onto the final name (atomic on POSIX: readers see the old file or the new
   one, never a mix);
4. ``fsync`` the folder, so the rename itself survives a power cut.

Any ``OSError`` on the way (``ENOSPC``, ``EDQUOT``, ``EACCES``, ``EROFS``, ...) removes the
temporary file, leaves the previous file under the final name untouched, and raises
:class:`SaveError` naming the path, the size and the cause. A SIGKILL can only leave a temporary
file behind (no code runs); :func:`remove_stale_temp_files` clears those, and
:class:`~afno_seg.engine.checkpoint_hook.AtomicCheckpointHook` calls it before training.
"""
import os
import os.path as osp
import re
from contextlib import suppress
from pathlib import Path

from mmengine.fileio import LocalBackend, register_backend
from mmengine.fileio import io as fileio_io

from .errors import UserError

__all__ = ['AtomicLocalBackend', 'SaveError', 'atomic_write', 'format_size',
           'remove_stale_temp_files']

_TEMP_NAME = re.compile(r'^\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$')


class SaveError(UserError):
    """A file (checkpoint, ``last_checkpoint``) could not be written; the message names it."""


def _temp_path(path: str) -> str:
    folder, name = osp.split(path)
    return osp.join(folder, f'.{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp')


def _write_all(file, data: bytes, path: str) -> None:
    """Write ``data`` for ``path`` to the open temporary ``file``.

    A seam: the tests replace it to make a save slow (to kill it half-way) or fail with ENOSPC.
    """
    file.write(data)


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable; some file systems (NFS, Windows) cannot, and say so."""
    with suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def format_size(num_bytes: float) -> str:
    """``9216000`` -> ``'9.2 MB'`` (decimal units, as disk tools report free space)."""
    if num_bytes < 1000:
        return f'{int(num_bytes)} B'
    for unit in ('KB', 'MB', 'GB'):
        num_bytes /= 1000
        if num_bytes < 1000 or unit == 'GB':
            break
    return f'{num_bytes:.1f} {unit}'


def atomic_write(data: bytes | str, path: str | Path, encoding: str = 'utf-8') -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either its old content or all of ``data``.

    Args:
        data (bytes | str): The content; ``str`` is encoded with ``encoding``.
        path (str | Path): Destination; its folder is created if missing.
        encoding (str): Encoding of ``str`` data. Default: 'utf-8'.

    Raises:
        SaveError: on any ``OSError``; the message names ``path`` and the cause, and the previous
            content of ``path`` (if any) is intact.
    """
    path = osp.abspath(os.fspath(path))
    if isinstance(data, str):
        data = data.encode(encoding)
    folder = osp.dirname(path)
    temp = None
    try:
        os.makedirs(folder, exist_ok=True)
        temp = _temp_path(path)
        # O_EXCL: never reuse someone else's file; 0o666 & ~umask, the mode open() would give.
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, 'wb') as file:
            _write_all(file, data, path)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        temp = None
    except OSError as error:
        previous = (f'the previous {osp.basename(path)} is intact' if osp.exists(path) else
                    'no earlier file of that name existed')
        raise SaveError(
            f'could not write {path} ({format_size(len(data))}): {error.strerror or error}'
            f' [errno {error.errno}]. Nothing was replaced: {previous}, and earlier checkpoints in '
            f'{folder} are untouched. Free space or fix permissions (or set '
            'default_hooks.checkpoint.out_dir to another disk), then continue with --resume.'
        ) from error
    finally:  # also on KeyboardInterrupt: a temporary file is never left by a live process
        if temp is not None:
            with suppress(OSError):
                os.remove(temp)
    _fsync_folder(folder)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temp_files(folder: str | Path) -> list[str]:
    """Delete temporary files that a killed :func:`atomic_write` left in ``folder``.

    Only names of the form ``.<name>.<pid>.<8 hex>.tmp`` whose ``pid`` is no running process are
    touched (another live writer, e.g. a rank sharing the folder, keeps its file). Returns the
    removed paths.
    """
    removed = []
    if not osp.isdir(folder):
        return removed
    for name in os.listdir(folder):
        match = _TEMP_NAME.match(name)
        if match and not _running(int(match['pid'])):
            with suppress(OSError):
                os.remove(osp.join(folder, name))
                removed.append(osp.join(folder, name))
    return removed


class AtomicLocalBackend(LocalBackend):
    """mmengine's ``LocalBackend`` whose writes are atomic (see the module docstring)."""

    def put(self, obj: bytes, filepath: str | Path) -> None:
        atomic_write(obj, filepath)

    def put_text(self, obj: str, filepath: str | Path, encoding: str = 'utf-8') -> None:
        atomic_write(obj, filepath, encoding=encoding)


# Local paths (no URI prefix) now go through the atomic backend, for every caller of
# mmengine.fileio (checkpoints, dumped metrics, ...).
register_backend('local', AtomicLocalBackend, force=True, prefixes='')


def _drop_cached_local_backends() -> None:
    """``get_file_backend`` caches instances: forget plain LocalBackends made before this import,
    which would otherwise go on writing in place."""
    cache = getattr(fileio_io, 'backend_instances', {})
    for key in [key for key, backend in cache.items() if type(backend) is LocalBackend]:
        del cache[key]


_drop_cached_local_backends()
