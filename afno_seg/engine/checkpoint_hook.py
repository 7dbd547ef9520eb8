"""A kill at any moment leaves ``last_checkpoint`` naming a complete checkpoint (mmengine's hook
writes in place, deleting the oldest first); a stop signal or a clock saves this iteration."""
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from mmengine.dist import all_reduce, get_world_size, is_main_process
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

from .atomic_io import ATOMIC_BACKEND, atomic_write, remove_stale_temp_files

INTERRUPTED_EXIT_CODE = 75  # sysexits.h EX_TEMPFAIL: tools/slurm_train.sh reruns on it
STOP_SIGNALS = ('SIGTERM', 'SIGINT', 'SIGUSR1')
now = time.monotonic  # a seam the tests replace


class TrainingInterrupted(Exception):
    """Training stopped after a stop signal, its last iteration saved (the message says where)."""
    exit_code = INTERRUPTED_EXIT_CODE  # what a tool exits with (run_tool)


class StopSignals:
    """Handlers (main thread, one instance at a time) recording the first of ``signals``; one more
    a second later (Slurm, torchrun send copies) exits, 128 + signal, at the next bytecode."""
    current = None  # the instance whose handlers are installed

    def __init__(self, signals: Sequence[str] = STOP_SIGNALS) -> None:
        self.signals = [signal.Signals[name] for name in signals]
        self.received, self._first_at, self._previous = None, 0.0, {}

    def __enter__(self) -> 'StopSignals':
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if StopSignals.current is not None:
            StopSignals.current.uninstall()
        self._previous = {number: signal.signal(number, self._handle) for number in self.signals}
        StopSignals.current = self
        return True

    def uninstall(self, ignore: bool = False) -> None:
        if StopSignals.current is self:
            for number, handler in self._previous.items():
                signal.signal(number, signal.SIG_IGN if ignore else handler)
            StopSignals.current = None

    def _handle(self, number: int, frame) -> None:
        if self.received is None:
            self.received, self._first_at = signal.Signals(number), time.monotonic()
        elif time.monotonic() - self._first_at >= 1.0:
            os.write(2, f'\nsecond stop signal ({signal.Signals(number).name}): exiting now, '
                        'without a checkpoint of the current iteration\n'.encode())
            os._exit(128 + number)


@contextmanager
def stop_signals_released(ignore_on_error: bool = False) -> Iterator[None]:
    """Uninstall the current :class:`StopSignals` however the block ends (no hook runs when
    training raises); on an exception with ``ignore_on_error``, to ``SIG_IGN``."""
    failed = ignore_on_error
    try:
        yield
        failed = False
    finally:
        if StopSignals.current is not None:
            StopSignals.current.uninstall(failed)


def restart_count() -> tuple[str, int] | None:
    """``('torchrun', n)`` / ``('Slurm', n)`` when this process is the n-th restart (n >= 1)."""
    for launcher, variable in (('torchrun', 'TORCHELASTIC_RESTART_COUNT'),
                               ('Slurm', 'SLURM_RESTART_COUNT')):
        if os.environ.get(variable, '0') != '0':
            return launcher, int(os.environ[variable])
    return None


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` writing local files (``best_*`` too) atomically; by iteration, it saves
    ``iter_N.pth``, then ``last_checkpoint``, then deletes the oldest, also ``interval_minutes``
    after the last save (Default: None) and on ``stop_signals`` (Default: SIGTERM, SIGINT, SIGUSR1;
    ``()`` keeps Python's) before raising :class:`TrainingInterrupted`. Distributed, the ranks agree
    on those (one all-reduce) every ``agree_every`` iterations (Default: 10) and at the last."""

    def __init__(self, *args, interval_minutes: float | None = None, agree_every: int = 10,
                 stop_signals: Sequence[str] = STOP_SIGNALS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interval_minutes, self.agree_every = interval_minutes, agree_every
        self._stop, self._last_save_time = StopSignals(stop_signals), 0.0

    def before_train(self, runner) -> None:
        local = '://' not in str(self.out_dir or runner.work_dir) and not self.file_client_args
        if local and self.backend_args is None:  # mmengine passes it to every save, best_* too
            self.backend_args = dict(backend=ATOMIC_BACKEND)
        super().before_train(runner)
        self._last_save_time = now()
        for folder in {self.out_dir, runner.work_dir} if local and is_main_process() else ():
            for path in remove_stale_temp_files(folder):
                runner.logger.warning(f'removed {path}, left by a save that was interrupted')
        if not self.by_epoch:  # AfnoSegRunner.train gives the handlers back
            self._stop.install()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if self.by_epoch:
            return
        last = self.is_last_train_iter(runner)
        scheduled = self.every_n_train_iters(runner, self.interval, self.save_begin) or (
            self.save_last and last)
        if scheduled:
            self.save(runner, '')
        if not (last or get_world_size() < 2 or self.every_n_train_iters(runner, self.agree_every)):
            return  # distributed, a request counts at an agreement only
        due = now() - self._last_save_time >= 60 * (self.interval_minutes or float('inf'))
        requests = torch.tensor([float(self._stop.received or 0), float(due)])
        all_reduce(requests, op='max')  # any rank's: all stop after the same iteration
        name = signal.Signals(int(requests[0])).name if requests[0] else None
        if (name or requests[1]) and not scheduled:  # a signal during that save needs no other
            self.save(runner, f' (stop signal {name})' if name else
                      f' ({self.interval_minutes:g} min since the last save)')
        if name and not last:
            message = (f'{name} received: training stopped after iteration {runner.iter + 1}; '
                       f'{self.last_ckpt} holds it and last_checkpoint names it. Run the same '
                       'command with --resume to continue.')
            runner.logger.warning(message)
            raise TrainingInterrupted(message)

    def save(self, runner, reason: str) -> None:
        """Save, point ``last_checkpoint`` at it, then delete (a kill in between loses nothing)."""
        step, outdated = runner.iter + 1, []
        runner.logger.info(f'Saving checkpoint at {step} iterations{reason}')
        if self.max_keep_ckpts > 0:
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        self._last_save_time = now()
        self.last_ckpt = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(step))
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(  # its meta: this epoch and iteration, as by_epoch=False says
            self.out_dir, self.filename_tmpl.format(step), self.file_client_args, by_epoch=False,
            save_optimizer=self.save_optimizer, save_param_scheduler=self.save_param_scheduler,
            backend_args=self.backend_args, **self.args)
        if is_main_process():
            atomic_write(self.last_ckpt, os.path.join(runner.work_dir, 'last_checkpoint'))
            for old in outdated:
                path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old))
                if self.file_backend.isfile(path):
                    self.file_backend.remove(path)
