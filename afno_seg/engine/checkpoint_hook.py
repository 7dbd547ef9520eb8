"""A kill at any moment leaves ``last_checkpoint`` naming a complete checkpoint, and a stop signal
or a clock saves the current iteration (mmengine's ``CheckpointHook`` deletes before it writes).

mmengine 0.10.7 deletes the oldest kept checkpoint, writes the new one, then ``last_checkpoint``
with a plain ``open(..., 'w')``. ``AtomicCheckpointHook`` keeps its arguments and ``save_best``
and saves iteration and epoch checkpoints itself through ``Runner.save_checkpoint``: the file
and then ``last_checkpoint`` atomically (:mod:`.atomic_io`), then the deletions. It clears a
killed save's temporary files and checks the free space before training; after an iteration in
which a stop signal (:mod:`.preemption`) arrived, or ``interval_minutes`` after the last save, it
saves, and on a signal raises :class:`~.preemption.TrainingInterrupted` (``tools/train.py``
exits 75). Distributed ranks agree on both every ``agree_every`` iterations. docs/reliability.md.
"""
import os.path as osp
import shutil
import signal
import time
from collections.abc import Sequence

import torch
from mmengine.dist import all_reduce, get_world_size, is_main_process
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

from .atomic_io import atomic_write, format_size, remove_stale_temp_files
from .errors import UserError
from .preemption import DEFAULT_SIGNALS, StopSignals, TrainingInterrupted

__all__ = ['AtomicCheckpointHook', 'DiskSpaceError', 'estimate_checkpoint_bytes']

# meta (the config text, dataset metainfo), message_hub and pickling overhead, generously.
CHECKPOINT_OVERHEAD_BYTES = 2_000_000


class DiskSpaceError(UserError):
    """The checkpoint folder cannot hold one more checkpoint."""


def _optimizer_state_factor(optimizer: torch.optim.Optimizer) -> int:
    """How many parameter-sized tensors the optimizer keeps per parameter (its saved state)."""
    defaults = getattr(optimizer, 'defaults', {})
    if 'betas' in defaults:  # Adam, AdamW, NAdam, ...: exp_avg, exp_avg_sq (+ max_exp_avg_sq)
        return 3 if defaults.get('amsgrad') else 2
    if 'momentum' in defaults:  # SGD, RMSprop: one momentum buffer when momentum is used
        return 1 if defaults['momentum'] else 0
    return 2  # unknown optimizer: assume Adam-like


def estimate_checkpoint_bytes(model: torch.nn.Module, optim_wrapper=None,
                              save_optimizer: bool = True) -> dict[str, int]:
    """Estimate the size of one checkpoint in bytes: ``{'model': weights and buffers,
    'optimizer': its state, 'overhead': ..., 'total': ...}``."""
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()
                      if isinstance(t, torch.Tensor))
    optimizer_bytes = 0
    if save_optimizer and optim_wrapper is not None:
        wrappers = optim_wrapper.values() if hasattr(optim_wrapper, 'values') else [optim_wrapper]
        for optimizer in (wrapper.optimizer for wrapper in wrappers):
            optimizer_bytes += _optimizer_state_factor(optimizer) * sum(
                p.numel() * p.element_size() for group in optimizer.param_groups
                for p in group['params'] if p.requires_grad)
    return dict(model=model_bytes, optimizer=optimizer_bytes, overhead=CHECKPOINT_OVERHEAD_BYTES,
                total=model_bytes + optimizer_bytes + CHECKPOINT_OVERHEAD_BYTES)


def free_bytes(folder: str) -> int:
    """Free bytes on the file system of ``folder`` (a seam the tests replace)."""
    return shutil.disk_usage(folder).free


def now() -> float:
    """Seconds on a monotonic clock (a seam the tests replace)."""
    return time.monotonic()


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` that never lets ``last_checkpoint`` name a partial or deleted file,
    and that saves on a stop signal and every ``interval_minutes``.

    Takes :class:`mmengine.hooks.CheckpointHook`'s arguments, plus:

    Args:
        interval_minutes (float | None): Also save when this many minutes passed since the last
            save (iteration-based training; checked after every iteration). Default: None (only
            every ``interval`` iterations).
        stop_signals (Sequence[str]): Signals that make training stop after the current
            iteration with a checkpoint (iteration-based training). Default: ('SIGTERM',
            'SIGINT', 'SIGUSR1'); ``()`` keeps Python's defaults.
        agree_every (int): Distributed, the ranks agree on a signal or a clock save this often
            (iterations) and at the last one. Default: 10.

    The free-space check needs a local ``out_dir`` (a remote backend skips it).
    """

    def __init__(self, *args, interval_minutes: float | None = None,
                 stop_signals: Sequence[str] = DEFAULT_SIGNALS, agree_every: int = 10,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Distributed: the ranks agree on a signal or a clock save (one all-reduce) this often
        # and at the last iteration, so a signal waits at most this many iterations (B3: ~10 s
        # on 8 GPUs); 1 agrees every iteration.
        self.agree_every = max(int(agree_every), 1)
        if interval_minutes is not None and not interval_minutes > 0:
            raise ValueError(f'interval_minutes must be a positive number of minutes or None, '
                             f'got {interval_minutes!r}')
        self.interval_minutes = interval_minutes
        self.stop_signals = tuple(stop_signals)
        self._stop: StopSignals | None = None
        self._last_save_time = 0.0

    def before_train(self, runner) -> None:
        super().before_train(runner)
        self._last_save_time = now()
        if is_main_process() and '://' not in str(self.out_dir):
            for path in remove_stale_temp_files(self.out_dir) + remove_stale_temp_files(
                    runner.work_dir):
                runner.logger.warning(f'removed {path}, left by a save that was interrupted')
            self._check_free_space(runner)
        if self.stop_signals and not self.by_epoch:
            self._stop = StopSignals(self.stop_signals,
                                     describe_state=lambda: _last_checkpoint_state(runner))
            if not self._stop.install():
                self._stop = None  # not the main thread: Python allows handlers only there

    def after_train(self, runner) -> None:
        super().after_train(runner)
        if self._stop is not None:
            self._stop.uninstall()
            self._stop = None

    def after_train_epoch(self, runner) -> None:
        if self.by_epoch and (self.every_n_epochs(runner, self.interval, self.save_begin) or
                              (self.save_last and self.is_last_train_epoch(runner))):
            runner.logger.info(f'Saving checkpoint at {runner.epoch + 1} epochs')
            self.save(runner, runner.epoch + 1, dict(epoch=runner.epoch + 1, iter=runner.iter))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if self.by_epoch:
            return
        step = runner.iter + 1
        scheduled = self.every_n_train_iters(runner, self.interval, self.save_begin) or (
            self.save_last and self.is_last_train_iter(runner))
        if scheduled:
            runner.logger.info(f'Saving checkpoint at {step} iterations')
            self.save(runner, step, dict(epoch=runner.epoch, iter=step))
        signal_number, due = self._requests(runner)  # after that save: a signal during it counts
        name = signal.Signals(signal_number).name if signal_number else None
        if (name or due) and not scheduled:
            reason = f'stop signal {name}' if name else (f'{self.interval_minutes:g} min since '
                                                         'the last save')
            runner.logger.info(f'Saving checkpoint at {step} iterations ({reason})')
            self.save(runner, step, dict(epoch=runner.epoch, iter=step))
        if name and step < runner.max_iters:
            # The handlers stay until the train() of build_runner's runner sets them to
            # SIG_IGN (in a tool) or back, also on an exception: a repeated signal (torchrun's
            # SIGTERM) must not cut exit 75 or the failing tool's message short.
            runner.logger.warning(
                f'{name} received: training stopped after iteration {step}; '
                f'{self.last_ckpt} holds it and last_checkpoint names it. Run the same command '
                'with --resume to continue.')
            raise TrainingInterrupted(name, step, self.last_ckpt)

    def _requests(self, runner) -> tuple[int, bool]:
        """(largest stop-signal number received or 0, whether a clock save is due); distributed,
        any rank's at an agreement and (0, False) between: every rank acts after the same one."""
        received = self._stop.received if self._stop is not None else None
        due = (self.interval_minutes is not None
               and now() - self._last_save_time >= 60 * self.interval_minutes)
        if get_world_size() == 1:
            return int(received or 0), due
        if not (self.every_n_train_iters(runner, self.agree_every)
                or self.is_last_train_iter(runner)):
            return 0, False
        requests = torch.tensor([float(received or 0), float(due)])
        all_reduce(requests, op='max')
        return int(requests[0]), bool(requests[1])

    def _remaining_saves(self, runner) -> int:
        left = runner.max_epochs - runner.epoch if self.by_epoch else runner.max_iters - runner.iter
        count = max(left, 0) // max(self.interval, 1) + (1 if self.save_last else 0)
        return min(count, self.max_keep_ckpts) if self.max_keep_ckpts > 0 else count

    def _check_free_space(self, runner) -> None:
        estimate = estimate_checkpoint_bytes(runner.model, runner.optim_wrapper,
                                             self.save_optimizer)
        free = free_bytes(self.out_dir)
        one = estimate['total']
        described = (f'one checkpoint needs about {format_size(one)} (weights and buffers '
                     f'{format_size(estimate["model"])}, optimizer state '
                     f'{format_size(estimate["optimizer"])})')
        if free < one:
            raise DiskSpaceError(
                f'not enough free space in {self.out_dir} to save a checkpoint: {described}, '
                f'and the disk has {format_size(free)} free. Free some space, or set '
                'default_hooks.checkpoint.out_dir (or --work-dir) to another disk.')
        kept = self._remaining_saves(runner)
        if free < kept * one:
            runner.logger.warning(
                f'{self.out_dir}: {described}; this run keeps up to {kept} of them '
                f'({format_size(kept * one)}) but the disk has {format_size(free)} free. A save '
                'that runs out of space stops training with an error; earlier checkpoints stay.')

    def save(self, runner, step: int, meta: dict) -> None:
        """Save checkpoint ``step``, point ``last_checkpoint`` at it, then delete what
        ``max_keep_ckpts`` no longer keeps (in this order: a kill in between loses nothing)."""
        outdated = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids
                                            and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        self._last_save_time = now()
        self.last_ckpt = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(step))
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, self.filename_tmpl.format(step), self.file_client_args,
            save_optimizer=self.save_optimizer, save_param_scheduler=self.save_param_scheduler,
            meta=meta, by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        atomic_write(self.last_ckpt, osp.join(runner.work_dir, 'last_checkpoint'))
        for old_step in outdated:
            path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old_step))
            if self.file_backend.isfile(path):
                self.file_backend.remove(path)


def _last_checkpoint_state(runner) -> str:
    """What ``last_checkpoint`` names now (for the message of an immediate exit)."""
    path = osp.join(runner.work_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return 'No checkpoint has been completed yet.'
    with open(path) as file:
        return f'last_checkpoint still names {file.read().strip()}.'
