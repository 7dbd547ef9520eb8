"""Distributed training and testing on CPUs (gloo), with nothing changed on GPUs.

mmengine 0.10.7's ``init_dist('pytorch')`` calls ``torch.cuda.set_device`` unconditionally and its
``wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to DDP; both fail on a machine without CUDA.
:func:`init_cpu_process_group` starts a gloo process group before the Runner is built (the Runner
then skips its own ``init_dist``), and :class:`DeviceAwareDistributedDataParallel` drops
``device_ids`` for CPU modules.
"""
import os

import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS

__all__ = ['DeviceAwareDistributedDataParallel', 'init_cpu_process_group']


@MODEL_WRAPPERS.register_module()
class DeviceAwareDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` that wraps CPU modules too (DDP forbids ``device_ids`` there)."""

    def __init__(self, module: torch.nn.Module, device_ids=None, **kwargs) -> None:
        on_cpu = all(p.device.type == 'cpu' for p in module.parameters())
        super().__init__(module=module, device_ids=None if on_cpu else device_ids, **kwargs)


def init_cpu_process_group(timeout_s: int = 1800) -> None:
    """Join the gloo process group that ``torchrun`` describes in RANK/WORLD_SIZE/MASTER_*."""
    if dist.is_initialized():
        return
    missing = [k for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT') if k not in os.environ]
    if missing:
        raise RuntimeError(f'--launcher pytorch needs torchrun\'s environment; missing {missing}. '
                           'Start with tools/dist_train.sh or torchrun.')
    import datetime
    dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=timeout_s))
