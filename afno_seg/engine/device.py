"""Run configs written for GPU clusters on a machine without CUDA, saying what changed.

A config in this project targets 8 GPUs with fp16 and SyncBN. Without CUDA,
:func:`adapt_config_to_device` rewrites, with one logged warning per change:

- ``AmpOptimWrapper`` (fp16, loss scaling) -> :class:`CPUAutocastOptimWrapper` (bfloat16 autocast);
- ``SyncBN`` -> ``BN`` everywhere in the model (SyncBN has no CPU kernel);
- distributed runs: gloo instead of NCCL, and DDP without ``device_ids``.

With CUDA available the config is returned untouched.
"""
import logging

import torch
from mmengine.config import Config
from mmengine.logging import print_log

__all__ = ['adapt_config_to_device']


def _replace_sync_bn(node) -> int:
    """Replace ``type='SyncBN'`` by ``'BN'`` in nested dicts/lists in place; return the count."""
    count = 0
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
            count += 1
        for value in node.values():
            count += _replace_sync_bn(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            count += _replace_sync_bn(value)
    return count


def adapt_config_to_device(cfg: Config, distributed: bool = False,
                           cuda_available: bool | None = None) -> Config:
    """Rewrite ``cfg`` in place for a CPU-only machine (see module docstring) and return it."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if cuda_available:
        return cfg

    def warn(message: str) -> None:
        print_log(f'[afno_seg] no CUDA device: {message}', logger='current', level=logging.WARNING)

    optim_wrapper = cfg.get('optim_wrapper')
    if optim_wrapper is not None and optim_wrapper.get('type') == 'AmpOptimWrapper':
        for key in ('loss_scale', 'dtype', 'use_fsdp'):
            optim_wrapper.pop(key, None)
        optim_wrapper['type'] = 'CPUAutocastOptimWrapper'
        warn('AmpOptimWrapper (fp16) replaced by CPUAutocastOptimWrapper (bfloat16 autocast, '
             'no loss scaling).')

    if 'model' in cfg:
        replaced = _replace_sync_bn(cfg.model)
        if replaced:
            warn(f'{replaced} SyncBN layer config(s) replaced by BN.')

    if distributed:
        env_cfg = cfg.setdefault('env_cfg', {})
        env_cfg.setdefault('dist_cfg', {})['backend'] = 'gloo'
        wrapper_cfg = cfg.get('model_wrapper_cfg') or {}
        if wrapper_cfg.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
            wrapper_cfg['type'] = 'DeviceAwareDistributedDataParallel'
            # What mmengine's default wrapping passes when model_wrapper_cfg is unset.
            wrapper_cfg.setdefault('broadcast_buffers', False)
            wrapper_cfg.setdefault('find_unused_parameters',
                                   cfg.get('find_unused_parameters', False))
            cfg.model_wrapper_cfg = wrapper_cfg
        warn('distributed backend gloo, DDP on CPU modules.')
    return cfg
