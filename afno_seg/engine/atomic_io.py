"""A failed or killed write never leaves a partial file under the final name (mmengine's local
backend writes in place): a hidden temporary file beside it is fsynced, then renamed onto it."""
import hashlib
import os
import re
from contextlib import suppress

from mmengine.fileio import LocalBackend, register_backend

from .distributed import process_running
from .errors import UserError

ATOMIC_BACKEND = 'atomic_local'  # for mmengine: backend_args=dict(backend=ATOMIC_BACKEND)
_TEMP_NAME = re.compile(r'^\..+\.(?P<pid>\d+)\.[0-9a-f]{8}\.(?P<host>h[0-9a-f]{6})\.tmp(\.\w+)?$')
# a pid means something on its own host only: ranks on other hosts share output folders
_HOST = 'h' + hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:6]


class SaveError(UserError):
    """A file (checkpoint, ``last_checkpoint``) could not be written; the message names it."""


def temp_name(path, suffix: str = '') -> str:
    """``.<name>.<pid>.<random>.<host>.tmp<suffix>`` beside ``path`` (``suffix``: a video's)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f'.{name}.{os.getpid()}.{os.urandom(4).hex()}.{_HOST}.tmp{suffix}')


def _write_all(file, data: bytes, path: str) -> None:  # tests make a write slow or fail here
    file.write(data)


def atomic_write(data: bytes | str, path, encoding: str = 'utf-8') -> None:
    """Replace ``path``'s content by all of ``data`` or nothing (:class:`SaveError`)."""
    path, temp = os.path.abspath(path), temp_name(path)
    data = data.encode(encoding) if isinstance(data, str) else data
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # O_EXCL: never reuse someone else's file; 0o666 & ~umask, the mode open() would give
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), 'wb') as file:
            _write_all(file, data, path)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except OSError as error:
        raise SaveError(f'could not write {path} ({len(data):,} bytes): {error.strerror or error} '
                        f'[errno {error.errno}]; nothing was replaced, the previous files are '
                        'intact. Free space or fix permissions, then continue with --resume.'
                        ) from error
    finally:  # also on KeyboardInterrupt; after the rename there is nothing to remove
        with suppress(OSError):
            os.remove(temp)
    descriptor = os.open(os.path.dirname(path), os.O_RDONLY)
    with suppress(OSError):  # make the rename durable; some file systems cannot (NFS)
        os.fsync(descriptor)
    os.close(descriptor)


def remove_stale_temp_files(folder) -> list[str]:
    """Delete (and return) this host's dead processes' :func:`temp_name` files in ``folder``."""
    removed = []
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        match = _TEMP_NAME.match(name)
        if match and match['host'] == _HOST and not process_running(int(match['pid'])):
            with suppress(OSError):
                os.remove(os.path.join(folder, name))
                removed.append(os.path.join(folder, name))
    return removed


@register_backend(ATOMIC_BACKEND)
class AtomicLocalBackend(LocalBackend):
    """mmengine's ``LocalBackend`` whose ``put`` is :func:`atomic_write`."""

    def put(self, obj: bytes, filepath) -> None:
        atomic_write(obj, filepath)
