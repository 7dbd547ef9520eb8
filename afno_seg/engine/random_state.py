"""A resumed run draws the same random numbers as one that never stopped (mmengine restores no
random generator: ``RandomStateHook`` saves and restores them with the checkpoints).

mmengine 0.10.7's ``IterBasedTrainLoop`` replays the data pipeline's draws on a resume by
fast-forwarding the loader, but the torch generators the model draws from (dropout, drop-path)
restart from the seed, and validation consumes random numbers, shifting every later draw. The
hook saves ``checkpoint['rng_state']`` (the torch CPU/CUDA state at the save, each rank's
Python/NumPy states at the start of training, where the replayed stream starts), restores them
on a resume (Python/NumPy before the fast-forward, torch before the first resumed iteration),
and makes validation during training leave the generators as it found them.

Limits (warned): ``randomness.seed`` must be fixed (with ``seed=None`` the samplers get a new
seed); with ``randomness.diff_rank_seed=True`` on several processes the torch state (rank 0's) is
not restored. docs/reliability.md, "Kill and resume".
"""
import random

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['RandomStateHook', 'get_random_state', 'set_random_state', 'torch_random_state']


def torch_random_state() -> dict:
    """torch CPU and (if initialised) current-CUDA-device generator states."""
    state = dict(torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state()
    return state


def get_random_state() -> dict:
    """Python, NumPy, torch CPU and (if initialised) current-CUDA-device generator states."""
    return dict(python=random.getstate(), numpy=np.random.get_state(), **torch_random_state())


def set_random_state(state: dict) -> None:
    """Inverse of :func:`get_random_state` for the generators present in ``state``."""
    if 'python' in state:
        random.setstate(state['python'])
    if 'numpy' in state:
        np.random.set_state(state['numpy'])
    if 'torch' in state:
        torch.set_rng_state(state['torch'].cpu())
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state['cuda'].cpu())


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Save and restore random-generator states with checkpoints (see the module docstring)."""

    priority = 'VERY_HIGH'  # before_train_iter: set the state before anything else draws

    def __init__(self) -> None:
        self._loaded = None  # rng_state of the checkpoint being resumed, until it is applied
        self._loaded_iter = None
        # Per-rank Python/NumPy states at the start of training; [] = unknown (not restorable).
        self._data_start = None
        self._pending_torch = None
        self._in_training = False
        self._around_val = None

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._loaded = checkpoint.get('rng_state')
        self._loaded_iter = checkpoint.get('meta', {}).get('iter')
        if self._loaded is None:
            runner.logger.warning(
                'checkpoint has no rng_state (saved without RandomStateHook): after a resume, '
                'dropout/drop-path draws restart from the seed, unlike an uninterrupted run.')

    def before_train(self, runner) -> None:
        self._in_training = True
        world_size, rank = get_world_size(), get_rank()
        loaded, randomness = self._loaded, runner.cfg.get('randomness') or {}
        if loaded is not None and runner.iter > 0 and runner.iter == self._loaded_iter:
            if len(loaded['data_start']) == world_size:
                self._data_start = loaded['data_start']
                set_random_state(self._data_start[rank])
            else:
                runner.logger.warning(
                    f'rng_state holds data-stream states of {len(loaded["data_start"])} '
                    f'processes, this run has {world_size}: Python/NumPy states not restored.')
                self._data_start = []
            if world_size > 1 and randomness.get('diff_rank_seed', False):
                runner.logger.warning('diff_rank_seed=True with several processes: the torch '
                                      'generator state is not restored (it differs per rank).')
            else:
                self._pending_torch = {k: v for k, v in loaded.items() if k in ('torch', 'cuda')}
            runner.logger.info(f'restored random generator states of iteration {runner.iter}')
            if randomness.get('seed') is None:
                runner.logger.warning(
                    'randomness.seed is not set: mmengine re-seeds on resume only after the data '
                    'samplers were built with a new random seed, so the sample order from here on '
                    'differs from the uninterrupted run. Set randomness=dict(seed=...) for an '
                    'exact continuation.')
        self._loaded = None
        if self._data_start is None:
            self._data_start = all_gather_object(dict(python=random.getstate(),
                                                      numpy=np.random.get_state()))

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        # After the fast-forward and the fetch of this batch: only the model's generators.
        if self._pending_torch is not None:
            set_random_state(self._pending_torch)
            self._pending_torch = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['rng_state'] = dict(**torch_random_state(), data_start=self._data_start,
                                       world_size=get_world_size())

    def before_val(self, runner) -> None:
        if self._in_training:
            self._around_val = get_random_state()

    def after_val(self, runner) -> None:
        if self._around_val is not None:
            set_random_state(self._around_val)
            self._around_val = None

    def after_train(self, runner) -> None:
        self._in_training = False
