"""Run configs written for GPU clusters (8 GPUs, fp16, SyncBN) on a machine without CUDA, saying
what changed: the precision (:mod:`.precision`), and for distributed runs gloo instead of NCCL
and mmengine's DDP wrapper with ``device_ids=None`` (the Runner's default passes
``[LOCAL_RANK]``, which DDP refuses for CPU modules). SyncBN becomes BatchNorm once the model is
built (:class:`~.runner.AfnoSegRunner`).
"""
import logging

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from .precision import apply_precision

__all__ = ['adapt_config_to_device']


def adapt_config_to_device(cfg: Config, distributed: bool = False,
                           cuda_available: bool | None = None,
                           precision: str | None = 'auto') -> Config:
    """Rewrite ``cfg`` in place for the device and return it (``precision=None``: the optimizer
    wrapper as it is, for a run that does not train)."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if precision is not None:
        apply_precision(cfg, precision, cuda_available)
    if cuda_available or not distributed:
        return cfg
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
    wrapper_cfg = cfg.get('model_wrapper_cfg') or {}
    if wrapper_cfg.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        # What mmengine's default wrapping passes when model_wrapper_cfg is unset, less the GPU.
        wrapper_cfg.update(type='MMDistributedDataParallel', device_ids=None)
        wrapper_cfg.setdefault('broadcast_buffers', False)
        wrapper_cfg.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
        cfg.model_wrapper_cfg = wrapper_cfg
    print_log('[afno_seg] no CUDA device: distributed backend gloo, DDP on CPU modules.',
              logger='current', level=logging.WARNING)
    return cfg
