"""Small OpenMMLab extensions the stack lacks; importing this module registers them."""
from .atomic_io import AtomicLocalBackend, SaveError, atomic_write, remove_stale_temp_files
from .checkpoint import CheckpointError, load_local_checkpoint
from .checkpoint_hook import AtomicCheckpointHook, DiskSpaceError, estimate_checkpoint_bytes
from .cpu_memory import cache_freed_cpu_memory
from .device import adapt_config_to_device
from .distributed import DeviceAwareDistributedDataParallel, init_cpu_process_group
from .errors import UserError
from .numerics import NonFiniteLossError, NonFiniteLossHook, find_first_non_finite
from .optim_wrapper import CPUAutocastOptimWrapper
from .preflight import DataRootError, UnknownTypeError, check_data_roots, check_model_types
from .random_state import RandomStateHook, get_random_state, set_random_state
from .run_checks import EmptySplitError, WorkDirError, check_splits_not_empty, check_work_dir
from .runner import build_runner, load_config, run_tool

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'DiskSpaceError', 'EmptySplitError',
    'NonFiniteLossError', 'check_splits_not_empty',
    'NonFiniteLossHook', 'RandomStateHook', 'SaveError', 'WorkDirError', 'atomic_write',
    'check_work_dir', 'estimate_checkpoint_bytes', 'find_first_non_finite', 'get_random_state',
    'remove_stale_temp_files', 'set_random_state',
    'CheckpointError', 'CPUAutocastOptimWrapper', 'DataRootError',
    'DeviceAwareDistributedDataParallel',
    'UnknownTypeError', 'UserError', 'adapt_config_to_device', 'check_data_roots',
    'build_runner', 'cache_freed_cpu_memory', 'check_model_types', 'init_cpu_process_group',
    'load_config',
    'load_local_checkpoint', 'run_tool'
]
