"""A data-loader worker killed or stuck is one line naming it and its sample (PyTorch names a pid,
or waits forever); a job's stop signal reaches the main process alone; an orphaned worker exits."""
import multiprocessing
import os
import signal
import threading
import time
import weakref
from contextlib import suppress

import torch
from mmengine.dataset import worker_init_fn as mmengine_worker_init_fn
from mmengine.registry import DATASETS

__all__ = ['DEFAULT_TIMEOUT_S', 'TrackedDataset', 'explain_worker_failure',
           'leave_stop_signals_to_parent', 'worker_init']

DEFAULT_TIMEOUT_S = 600  # one batch; generous for a slow first read from a network file system
_tracked: 'weakref.WeakSet[TrackedDataset]' = weakref.WeakSet()


class TrackedDataset(torch.utils.data.Dataset):
    """``dataset`` (or its config) whose loader workers note in shared memory which index each
    loads since when; ``timeout``: the loader's (0: none)."""

    def __init__(self, dataset, num_workers: int, timeout: float = 0) -> None:
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.num_workers, self.timeout = num_workers, timeout
        # Per worker: pid, index being loaded (-1: none), time.time() it started.
        self.slots = multiprocessing.Array('d', [0.0, -1.0, 0.0] * num_workers, lock=False)
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
        self.slots[3 * worker.id:3 * worker.id + 3] = [os.getpid(), index, time.time()]
        try:
            return self.dataset[index]
        finally:
            self.slots[3 * worker.id + 1] = -1.0

    def describe(self, index: int) -> str:
        if index < 0:
            return 'between samples'
        with suppress(Exception):  # a dataset without get_data_info: the index is all we know
            info = self.dataset.get_data_info(index)
            return f'sample {index} ({info.get("img_path") or info["filename"]})'
        return f'sample {index}'


def worker_init(worker_id: int, num_workers: int = 0, rank: int = 0,
                seed: int | None = None) -> None:
    """A ``worker_init_fn``: SIGINT and SIGUSR1 ignored, SIGTERM obeyed from the parent only (the
    main process checkpoints first); exit once the parent died; with ``seed``, mmengine's seeds."""
    for number in (signal.SIGINT, signal.SIGUSR1):
        signal.signal(number, signal.SIG_IGN)
    # Python's handlers cannot see the sender: a thread waits for SIGTERM with sigtimedwait.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    if seed is not None:
        mmengine_worker_init_fn(worker_id, num_workers, rank, seed)


leave_stop_signals_to_parent = worker_init  # for a loader that seeds its workers itself


def _exit_with_parent() -> None:
    # PyTorch's own check for a dead parent waits for a stuck sample to end and then, at exit, for
    # its queue to flush into a pipe no one reads: orphans of a SIGKILLed parent stayed for good.
    parent = os.getppid()
    while os.getppid() == parent:
        info = signal.sigtimedwait({signal.SIGTERM}, 1.0)
        if info is not None and info.si_pid == parent:
            break
    os._exit(0)


def explain_worker_failure(error: BaseException) -> str | None:
    """One line naming worker and sample while a loader worker is dead, or stuck in one sample for
    half its loader's ``timeout`` or more; else None. ``error`` is not read (PyTorch raises a dead
    worker's error from a SIGCHLD handler, wrapped in whatever the main thread was doing)."""
    stuck = []
    for dataset in list(_tracked):
        for worker in range(dataset.num_workers):
            pid, index = (int(v) for v in dataset.slots[3 * worker:3 * worker + 2])
            seconds, sample = time.time() - dataset.slots[3 * worker + 2], dataset.describe(index)
            try:  # PyTorch's SIGCHLD handler leaves a dead worker unreaped until shutdown
                status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except OSError:  # not started (pid 0), shut down, or another process's child
                continue
            if status is not None:
                how = (f'was killed by signal: {signal.strsignal(status.si_status)}'
                       if status.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else
                       f'exited with status {status.si_status}')
                oom = (' Out of memory? The OOM killer sends SIGKILL (see `dmesg`).'
                       if how.endswith(signal.strsignal(signal.SIGKILL)) else '')
                return (f'data-loader worker {worker} (pid {pid}) {how}, '
                        f'{"while loading " * (index >= 0)}{sample}.{oom} Continue with --resume.')
            if index >= 0 and 0 < dataset.timeout <= 2 * seconds:
                stuck.append((seconds, worker, pid, sample, dataset.timeout))
    if not stuck:
        return None
    seconds, worker, pid, sample, timeout = max(stuck)
    return (f'no batch from the data-loader workers within the timeout of {timeout:g} s: worker '
            f'{worker} (pid {pid}) has been loading {sample} for {seconds:.0f} s. Check that file '
            f'and the file system; a loader\'s `timeout` (seconds, default {DEFAULT_TIMEOUT_S}, '
            '0 = wait forever) is set in its config dict.')
