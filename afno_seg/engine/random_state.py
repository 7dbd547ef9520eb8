"""A resumed run draws the random numbers of one that never stopped (with ``randomness.seed``)."""
import random

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['RandomStateHook', 'set_random_state', 'torch_random_state']


def torch_random_state() -> dict:
    """torch's CPU and (if initialised) current-CUDA-device generator states."""
    cuda = dict(cuda=torch.cuda.get_rng_state()) if torch.cuda.is_initialized() else {}
    return dict(torch=torch.get_rng_state(), **cuda)


def set_random_state(state: dict) -> None:
    """Set the generators in ``state`` (python, numpy, torch, cuda: a CUDA state needs CUDA)."""
    for key, setter in (('python', random.setstate), ('numpy', np.random.set_state),
                        ('torch', torch.set_rng_state), ('cuda', torch.cuda.set_rng_state)):
        if key in state and (key != 'cuda' or torch.cuda.is_available()):
            setter(state[key].cpu() if key in ('torch', 'cuda') else state[key])


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Save the random generators in ``checkpoint['rng_state']`` (torch's now; Python's and NumPy's
    from the start of training, where mmengine's loader fast-forward replays) and restore them on a
    resume, before that replay and the first forward pass; validation leaves them as they were."""

    priority = 'VERY_HIGH'  # before_train_iter: set the state before anything else draws

    def __init__(self) -> None:
        self._loaded = self._data_start = self._torch = self._around_val = None

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._loaded = checkpoint.get('rng_state')

    def before_train(self, runner) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None and runner.iter > 0:  # resumed (load_from leaves iter at 0)
            self._data_start = loaded['data_start']
            if len(self._data_start) == get_world_size():
                set_random_state(self._data_start[get_rank()])
            else:  # saved by another number of processes: not restorable, here or later
                self._data_start = []
            per_rank = (runner.cfg.get('randomness') or {}).get('diff_rank_seed')
            if get_world_size() == 1 or not per_rank:  # (else not restorable)
                self._torch = {k: v for k, v in loaded.items() if k in ('torch', 'cuda')}
        if self._data_start is None:
            self._data_start = all_gather_object(dict(python=random.getstate(),
                                                      numpy=np.random.get_state()))

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if self._torch is not None:
            set_random_state(self._torch)
            self._torch = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['rng_state'] = dict(**torch_random_state(), data_start=self._data_start)

    def before_val(self, runner) -> None:
        self._around_val = dict(python=random.getstate(), numpy=np.random.get_state(),
                                **torch_random_state())

    def after_val(self, runner) -> None:
        set_random_state(self._around_val)
