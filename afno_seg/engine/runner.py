"""What tools/train.py and tools/test.py share: config loading, preflight, device adaptation."""
import gc
import logging
import os
import os.path as osp
import sys
from collections.abc import Callable, Sequence

import torch
from mmengine.config import Config
from mmengine.runner import Runner

from .cpu_memory import cache_freed_cpu_memory
from .device import adapt_config_to_device
from .distributed import init_cpu_process_group
from .errors import UserError
from .preflight import check_data_roots, check_model_types
from .run_checks import check_splits_not_empty, check_work_dir

__all__ = ['build_runner', 'load_config', 'run_tool']


def load_config(config: str, launcher: str = 'none', cfg_options: dict | None = None,
                work_dir: str | None = None) -> Config:
    """``Config.fromfile`` plus mmseg's tool conventions (``--cfg-options``, default work_dir)."""
    if not osp.isfile(config):
        raise UserError(f'config file not found: {config}')
    cfg = Config.fromfile(config)
    cfg.launcher = launcher
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(config))[0])
    return cfg


def build_runner(cfg: Config, loaders: Sequence[str]) -> Runner:
    """Check data, work_dir, model types; adapt to the device (on a CPU also the allocator, see
    :mod:`.cpu_memory`), join a CPU process group, build."""
    distributed = cfg.launcher != 'none'
    check_data_roots(cfg, loaders)
    check_splits_not_empty(cfg, loaders)
    check_work_dir(cfg.work_dir)
    check_model_types(cfg)
    adapt_config_to_device(cfg, distributed=distributed)
    if not torch.cuda.is_available():
        cache_freed_cpu_memory()  # large activations re-used, not page-faulted anew each step
    if distributed and cfg.launcher == 'pytorch' and not torch.cuda.is_available():
        init_cpu_process_group()
    if 'runner_type' in cfg:
        from mmengine.registry import RUNNERS
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)


def run_tool(main: Callable[[], None]) -> int:
    """Run a tool's main; a :class:`UserError` prints its message alone and exits 1.

    In a torchrun child the process then leaves without interpreter finalization (after flushing
    output and logs): gloo's threads, still referenced by DDP objects that only the garbage
    collector frees, could otherwise abort the rank at exit ("terminate called without an active
    exception", SIGABRT) after its work is done.
    """
    code = 0
    try:
        main()
    except UserError as error:
        print(f'error: {error}', file=sys.stderr)
        code = 1
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            _leave_process_group()
    if 'TORCHELASTIC_RUN_ID' in os.environ:  # set by torchrun for its children only
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code


def _leave_process_group() -> None:
    """Wait for every rank, free the cycles that hold DDP's reducer, then destroy the group."""
    try:
        torch.distributed.barrier()
    except RuntimeError:  # a peer already failed: leave anyway
        pass
    gc.collect()
    torch.distributed.destroy_process_group()
