"""Data-loader workers: a dead or stuck one is an error naming it and its sample, in bounded time.

PyTorch alone names only a process id when a worker is killed (the OOM killer's SIGKILL), waits
forever for a stuck one (``timeout=0``), and lets a stop signal sent to the whole job kill the
workers before the main process can checkpoint. :class:`WorkerGuard` (set on every loader with
workers by :class:`~.runner.AfnoSegRunner`, with a ``timeout``) records in shared memory which
sample each worker loads and leaves the stop signals to the main process;
:func:`explain_worker_failure` turns PyTorch's error into one line naming the loader, the worker,
the sample and its file (docs/reliability.md, "Data-loader workers").
"""
import multiprocessing
import os
import re
import signal
import threading
import time
import weakref
from contextlib import suppress
from functools import wraps

import torch

from .errors import error_chain

__all__ = ['DEFAULT_TIMEOUT_S', 'WorkerGuard', 'explain_worker_failure', 'guard_dataloader']

DEFAULT_TIMEOUT_S = 600  # one batch; generous for a slow first read from a network file system
_IDLE = -1.0
_FIELDS = 3  # per worker: pid, index being loaded (-1: idle), time it started (time.time())
_WORKER_PIDS = re.compile(r'DataLoader worker \(pids?(?:\(s\))? ([\d, ]+)\)')
_TIMED_OUT = re.compile(r'DataLoader timed out after ([\d.]+) seconds')

_guards: 'weakref.WeakSet[WorkerGuard]' = weakref.WeakSet()


class WorkerGuard:
    """``worker_init_fn`` wrapper: stop signals left to the main process, sample tracking.

    Args:
        loader (DataLoader): The loader; its ``worker_init_fn`` (mmengine's seeding) runs after.
        name (str): The loader, for messages (``'train_dataloader'``). Default: 'dataloader'.
    """

    def __init__(self, loader, name: str = 'dataloader') -> None:
        self.num_workers, self.init_fn, self.name = loader.num_workers, loader.worker_init_fn, name
        self.dataset = loader.dataset  # the main process's, to name a sample's file
        # Shared with the workers (fork inherits it; spawn pickles it with the Process).
        self.slots = multiprocessing.Array('d', [0.0, _IDLE, 0.0] * self.num_workers, lock=False)
        _guards.add(self)

    def __call__(self, worker_id: int) -> None:
        _leave_stop_signals_to_parent()
        self.slots[_FIELDS * worker_id] = os.getpid()
        # a worker_init_fn runs in a worker only, where get_worker_info() is set
        _track_samples(torch.utils.data.get_worker_info().dataset, self.slots, _FIELDS * worker_id)
        if self.init_fn is not None:
            self.init_fn(worker_id)

    def workers(self) -> list[dict]:
        """Per worker: ``pid``, ``index`` being loaded (None when idle), ``seconds`` on it."""
        now, out = time.time(), []
        for worker_id in range(self.num_workers):
            pid, index, started = self.slots[_FIELDS * worker_id:_FIELDS * (worker_id + 1)]
            busy = index != _IDLE
            out.append(dict(worker=worker_id, pid=int(pid), index=int(index) if busy else None,
                            seconds=now - started if busy else None))
        return out

    def describe_sample(self, index: int) -> str:
        path = None
        with suppress(Exception):  # a dataset without get_data_info: the index is all we know
            info = self.dataset.get_data_info(index)
            path = info.get('img_path') or info.get('filename')
        return f'sample {index} ({path})' if path else f'sample {index}'


def _leave_stop_signals_to_parent() -> None:
    """In a worker: the main process checkpoints on stop signals and then shuts workers down."""
    if threading.current_thread() is threading.main_thread():
        signal.set_wakeup_fd(-1)  # inherited from the main process's StopSignals by fork
        for name in ('SIGINT', 'SIGUSR1'):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        # SIGTERM: only from the parent (PyTorch's shutdown), read by a thread with sigwaitinfo.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_exit_on_sigterm_from_parent, name='afno_seg-worker-sigterm',
                         daemon=True).start()


def _exit_on_sigterm_from_parent() -> None:
    parent = os.getppid()
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent or os.getppid() != parent:
            os._exit(0)


def _track_samples(dataset, slots, offset: int) -> None:
    """Make this worker's copy of ``dataset`` record the index it is loading in ``slots``."""
    cls = type(dataset)
    if getattr(cls, '_afno_seg_tracked', False) or not hasattr(cls, '__getitem__'):
        return
    original = cls.__getitem__

    @wraps(original)
    def getitem(self, index):
        slots[offset + 1], slots[offset + 2] = float(index), time.time()
        try:
            return original(self, index)
        finally:
            slots[offset + 1] = _IDLE

    with suppress(TypeError):  # a subclass of this worker's copy: the main process's is untouched
        dataset.__class__ = type(cls.__name__, (cls, ), dict(__getitem__=getitem,
                                                              _afno_seg_tracked=True))


def guard_dataloader(loader, name: str = 'dataloader'):
    """Wrap ``loader.worker_init_fn`` in a :class:`WorkerGuard` (loaders with workers only)."""
    if getattr(loader, 'num_workers', 0) > 0 and not isinstance(loader.worker_init_fn,
                                                                 WorkerGuard):
        loader.worker_init_fn = WorkerGuard(loader, name)
    return loader


def explain_worker_failure(error: BaseException) -> str | None:
    """One line for PyTorch's "worker died" / "timed out" errors, naming worker and sample.

    PyTorch raises a dead worker's error from a SIGCHLD handler, wherever the main thread is, and
    the code there may wrap it (mmengine's config formatting turns it into a SyntaxError): the
    whole chain of causes is searched."""
    for cause in error_chain(error):
        message = _explain(str(cause))
        if message is not None:
            return message
    return None


def _explain(text: str) -> str | None:
    guards = list(_guards)
    dead = _WORKER_PIDS.search(text)
    if dead:
        pids = [int(pid) for pid in dead[1].replace(' ', '').split(',') if pid]
        how = text[dead.end():].split('. ', 1)[0].strip(' .').replace('is killed', 'was killed')
        how = how or 'exited'
        named = []
        for guard in guards:
            for worker in guard.workers():
                if worker['pid'] in pids:
                    what = (f'while loading {guard.describe_sample(worker["index"])}'
                            if worker['index'] is not None else 'between samples')
                    named.append(f'{guard.name} worker {worker["worker"]} (pid {worker["pid"]}) '
                                 f'{how}, {what}')
        if not named:
            named = [f'data-loader worker (pid(s) {", ".join(map(str, pids))}) {how}']
        hint = (' SIGKILL is what the kernel\'s OOM killer sends when memory runs out (see '
                '`dmesg`): lower num_workers or the batch size, or add memory.'
                if 'Killed' in text or 'SIGKILL' in text else '')
        return f'{"; ".join(named)}.{hint} Continue with --resume.'
    timed_out = _TIMED_OUT.search(text)
    if timed_out:
        busy = [(guard, worker) for guard in guards for worker in guard.workers()
                if worker['index'] is not None]
        if busy:  # the longest-busy worker
            guard, worker = max(busy, key=lambda item: item[1]['seconds'])
            stuck = (f'{guard.name} worker {worker["worker"]} (pid {worker["pid"]}) has been '
                     f'loading {guard.describe_sample(worker["index"])} for '
                     f'{worker["seconds"]:.0f} s')
        else:
            stuck = 'no worker is inside a sample (stuck in collate or in a transfer)'
        return (f'no batch from the data-loader workers within the timeout of {timed_out[1]} s: '
                f'{stuck}. Check that file and the file system; a loader\'s `timeout` (seconds, '
                f'default {DEFAULT_TIMEOUT_S}, 0 = wait forever) is set in its config dict.')
    return None
