"""Small OpenMMLab extensions the stack lacks; importing this module registers them."""
from .atomic_io import AtomicLocalBackend, SaveError, atomic_write, remove_stale_temp_files
from .checkpoint import CheckpointError, load_local_checkpoint
from .checkpoint_hook import AtomicCheckpointHook, DiskSpaceError, estimate_checkpoint_bytes
from .cpu_memory import cache_freed_cpu_memory
from .device import adapt_config_to_device
from .distributed import init_cpu_process_group
from .errors import UserError
from .numerics import NonFiniteLossError, NonFiniteLossHook, find_first_non_finite
from .optim_wrapper import CPUAutocastOptimWrapper
from .precision import PRECISIONS, apply_precision
from .preflight import (
    DataRootError,
    EmptySplitError,
    UnknownTypeError,
    WorkDirError,
    check_data_roots,
    check_model_types,
    check_splits_not_empty,
    check_work_dir,
)
from .random_state import RandomStateHook, get_random_state, set_random_state
from .runner import AfnoSegRunner, build_runner, load_config, run_tool

__all__ = [
    'adapt_config_to_device', 'AfnoSegRunner', 'apply_precision', 'atomic_write',
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'build_runner', 'cache_freed_cpu_memory',
    'check_data_roots', 'check_model_types', 'check_splits_not_empty', 'check_work_dir',
    'CheckpointError', 'CPUAutocastOptimWrapper', 'DataRootError', 'DiskSpaceError',
    'EmptySplitError', 'estimate_checkpoint_bytes', 'find_first_non_finite', 'get_random_state',
    'init_cpu_process_group', 'load_config', 'load_local_checkpoint', 'NonFiniteLossError',
    'NonFiniteLossHook', 'PRECISIONS', 'RandomStateHook', 'remove_stale_temp_files', 'run_tool',
    'SaveError', 'set_random_state', 'UnknownTypeError', 'UserError', 'WorkDirError'
]
