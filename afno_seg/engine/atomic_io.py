"""Atomic local file writes, so a killed or failed save never leaves a partial checkpoint.

mmengine 0.10.7 saves a checkpoint with ``get_file_backend(path).put(bytes, path)``, for a local
path an ``open(path, 'wb')`` + ``write``: a job killed during it, or a full disk, leaves a
truncated ``iter_N.pth`` under the final name. :class:`AtomicLocalBackend` replaces mmengine's
local backend (``register_backend(..., force=True)`` on import of :mod:`afno_seg`); its writes
go to a hidden temporary file in the same folder (:func:`temp_name`: it names the host and the
process), are ``fsync``-ed, ``os.replace``-d onto the
name (atomic on POSIX) and the folder is ``fsync``-ed. An ``OSError`` on the way removes the
temporary file, leaves the previous file intact and raises :class:`SaveError` naming the path,
the size and the cause. A SIGKILL can leave only a temporary file, which
:func:`remove_stale_temp_files` clears.
"""
import hashlib
import os
import os.path as osp
import re
import socket
from contextlib import suppress
from pathlib import Path

from mmengine.fileio import LocalBackend, register_backend
from mmengine.fileio import io as fileio_io

from .distributed import process_running
from .errors import UserError

__all__ = ['AtomicLocalBackend', 'SaveError', 'atomic_write', 'format_size',
           'remove_stale_temp_files', 'temp_name']

# (names without a host tag: written before it existed, judged on this host)
_TEMP_NAME = re.compile(
    r'^\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}(\.(?P<host>h[0-9a-f]{6}))?\.tmp(\.\w+)?$')


def _host_tag() -> str:
    # a PID means something on its own host only: ranks on other hosts share output folders
    return 'h' + hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def temp_name(path: str | Path, suffix: str = '') -> str:
    """A hidden temporary name beside ``path`` that no other writer uses:
    ``.<name>.<pid>.<8 random hex>.<host tag>.tmp<suffix>`` (``suffix``: e.g. a video's
    container suffix, which the writer picks its format by)."""
    folder, name = osp.split(osp.abspath(os.fspath(path)))
    unique = f'{os.getpid()}.{os.urandom(4).hex()}.{_host_tag()}'
    return osp.join(folder, f'.{name}.{unique}.tmp{suffix}')


class SaveError(UserError):
    """A file (checkpoint, ``last_checkpoint``) could not be written; the message names it."""


def _write_all(file, data: bytes, path: str) -> None:
    """A seam: the tests replace it to make a save slow (to kill it half-way) or fail."""
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
    """Write ``data`` (``str``: encoded) to ``path`` (its folder created if missing) so that
    ``path`` holds either its old content or all of ``data``; :class:`SaveError` otherwise."""
    path = osp.abspath(os.fspath(path))
    if isinstance(data, str):
        data = data.encode(encoding)
    folder, name = osp.split(path)
    temp = None
    try:
        os.makedirs(folder, exist_ok=True)
        temp = temp_name(path)
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


def remove_stale_temp_files(folder: str | Path) -> list[str]:
    """Delete temporary files that a killed :func:`atomic_write` left in ``folder``.

    Only names of :func:`temp_name`'s form written on this host whose ``pid`` is no running
    process are touched (another live writer keeps its file: a rank sharing the folder, on this
    host or another). Returns the removed paths.
    """
    removed, host = [], _host_tag()
    for name in os.listdir(folder) if osp.isdir(folder) else ():
        match = _TEMP_NAME.match(name)
        if match and match['host'] in (host, None) and not process_running(int(match['pid'])):
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
