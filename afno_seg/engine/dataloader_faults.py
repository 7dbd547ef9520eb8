"""Data-loader workers: a dead or stuck one is an error naming it and its sample, in bounded time,
and a stop signal sent to every process of the job leaves the checkpoint to the main process.

PyTorch alone names only a process id when a worker is killed (the OOM killer's SIGKILL), waits
forever for a stuck one (``timeout=0``), and lets a signal that Slurm or a terminal sends to all
processes kill the workers before the main process can checkpoint. :class:`~.runner.AfnoSegRunner`
builds every loader with workers through mmengine's config keys: a ``timeout`` (default
:data:`DEFAULT_TIMEOUT_S`), the dataset inside :class:`TrackedDataset` (which records in shared
memory the sample each worker loads) and :func:`worker_init` as ``worker_init_fn`` (mmengine's
seeding, then :func:`leave_stop_signals_to_parent`, a ``worker_init_fn`` of its own for any other
loader). :func:`explain_worker_failure` reads the workers' state, not PyTorch's messages
(docs/reliability.md, "Data-loader workers").
"""
import multiprocessing
import os
import signal
import threading
import time
import weakref
from contextlib import suppress

import torch
from mmengine.dataset import worker_init_fn as mmengine_worker_init_fn

__all__ = ['DEFAULT_TIMEOUT_S', 'TrackedDataset', 'explain_worker_failure',
           'leave_stop_signals_to_parent', 'worker_init']

DEFAULT_TIMEOUT_S = 600  # one batch; generous for a slow first read from a network file system
_IDLE = -1.0
_FIELDS = 3  # per worker: pid, index being loaded (-1: idle), time it started (time.time())

_tracked: 'weakref.WeakSet[TrackedDataset]' = weakref.WeakSet()


class TrackedDataset(torch.utils.data.Dataset):
    """``dataset`` whose items, loaded in a data-loader worker, are recorded in shared memory:
    which index each worker loads since when. Everything else is ``dataset``'s.

    Args:
        dataset (Dataset | dict): The dataset, or its config (built by mmengine's ``DATASETS``).
        num_workers (int): The loader's workers.
        timeout (float): The loader's ``timeout``; 0: none. Default: 0.
    """

    def __init__(self, dataset, num_workers: int, timeout: float = 0) -> None:
        if isinstance(dataset, dict):
            from mmengine.registry import DATASETS
            dataset = DATASETS.build(dataset)
        self.dataset, self.num_workers, self.timeout = dataset, num_workers, timeout
        # Shared with the workers (fork inherits it; spawn pickles it with the Process).
        self.slots = multiprocessing.Array('d', [0.0, _IDLE, 0.0] * num_workers, lock=False)
        _tracked.add(self)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name):  # metainfo, full_init, get_data_info, ...: the dataset's
        if name.startswith('__') or name == 'dataset':  # (unpickling: not yet set)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index):
        worker = torch.utils.data.get_worker_info()
        if worker is None:
            return self.dataset[index]
        offset = _FIELDS * worker.id
        self.slots[offset + 1], self.slots[offset + 2] = float(index), time.time()
        try:
            return self.dataset[index]
        finally:
            self.slots[offset + 1] = _IDLE

    def workers(self) -> list[dict]:
        """Per worker: ``pid`` (0: not started), ``index`` being loaded (None when idle),
        ``seconds`` on it."""
        now, out = time.time(), []
        for worker_id in range(self.num_workers):
            pid, index, started = self.slots[_FIELDS * worker_id:_FIELDS * (worker_id + 1)]
            busy = index != _IDLE
            out.append(dict(worker=worker_id, pid=int(pid), index=int(index) if busy else None,
                            seconds=now - started if busy else None))
        return out

    def describe(self, worker: dict) -> str:
        if worker['index'] is None:
            return 'between samples'
        path = None
        with suppress(Exception):  # a dataset without get_data_info: the index is all we know
            info = self.dataset.get_data_info(worker['index'])
            path = info.get('img_path') or info.get('filename')
        return f'sample {worker["index"]}' + (f' ({path})' if path else '')


def worker_init(worker_id: int, num_workers: int, rank: int, seed: int | None = None) -> None:
    """A data-loader worker's start: stop signals left to the main process, its pid noted
    (:class:`TrackedDataset`), then mmengine's seeding (its default ``worker_init_fn``)."""
    leave_stop_signals_to_parent(worker_id)
    dataset = torch.utils.data.get_worker_info().dataset
    if isinstance(dataset, TrackedDataset):
        dataset.slots[_FIELDS * worker_id] = os.getpid()
    if seed is not None:
        mmengine_worker_init_fn(worker_id, num_workers, rank, seed)


def leave_stop_signals_to_parent(worker_id: int = 0) -> None:
    """A ``worker_init_fn``: SIGINT and SIGUSR1 ignored, SIGTERM obeyed only from the parent
    (PyTorch's shutdown of a stuck worker), so a signal to every process of the job reaches the
    main process alone, which checkpoints and then shuts its workers down."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.set_wakeup_fd(-1)  # inherited from the main process's StopSignals by fork
    for number in (signal.SIGINT, signal.SIGUSR1):
        signal.signal(number, signal.SIG_IGN)
    # Python's handlers cannot see the sender: a thread waits for SIGTERM with sigwaitinfo.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_exit_on_sigterm_from_parent, name='afno_seg-worker-sigterm',
                     daemon=True).start()


def _exit_on_sigterm_from_parent() -> None:
    parent = os.getppid()
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent or os.getppid() != parent:
            os._exit(0)


def _state(pid: int) -> str | None:
    """'running', how worker ``pid`` ended (an unreaped child of this process: PyTorch's SIGCHLD
    handler leaves it so until its loader shuts down), or None (no such child: not started,
    shut down, or another process's)."""
    try:
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) if pid else None
    except ChildProcessError:
        return None
    if status is None:
        return 'running' if pid else None
    if status.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return f'was killed by signal: {signal.strsignal(status.si_status)}'
    return f'exited with status {status.si_status}'


def explain_worker_failure(error: BaseException) -> str | None:
    """One line for a failure while a data-loader worker is dead, or stuck in one sample for at
    least half its loader's ``timeout``, naming worker and sample; None otherwise. The state of
    the workers is read, not ``error``: PyTorch raises a dead worker's error from a SIGCHLD
    handler, wherever the main thread is, and the code there may wrap it in anything."""
    workers = [(dataset, worker, _state(worker['pid'])) for dataset in list(_tracked)
               for worker in dataset.workers()]
    for dataset, worker, state in workers:
        if state not in (None, 'running'):
            hint = (' SIGKILL is what the kernel\'s OOM killer sends when memory runs out (see '
                    '`dmesg`): lower num_workers or the batch size, or add memory.'
                    if state.endswith(signal.strsignal(signal.SIGKILL)) else '')
            return (f'data-loader worker {worker["worker"]} (pid {worker["pid"]}) {state}, '
                    f'{"while loading " * (worker["index"] is not None)}'
                    f'{dataset.describe(worker)}.{hint} Continue with --resume.')
    stuck = [(worker['seconds'], dataset, worker) for dataset, worker, state in workers
             if state == 'running' and dataset.timeout
             and (worker['seconds'] or 0) >= dataset.timeout / 2]
    if not stuck:
        return None
    seconds, dataset, worker = max(stuck, key=lambda item: item[0])
    return (f'no batch from the data-loader workers within the timeout of {dataset.timeout:g} s: '
            f'worker {worker["worker"]} (pid {worker["pid"]}) has been loading '
            f'{dataset.describe(worker)} for {seconds:.0f} s. Check that file and the file '
            f'system; a loader\'s `timeout` (seconds, default {DEFAULT_TIMEOUT_S}, 0 = wait '
            'forever) is set in its config dict.')
