"""Small OpenMMLab extensions the stack lacks; importing this module registers them."""
from .checkpoint import CheckpointError, load_local_checkpoint
from .device import adapt_config_to_device
from .distributed import DeviceAwareDistributedDataParallel, init_cpu_process_group
from .errors import UserError
from .optim_wrapper import CPUAutocastOptimWrapper
from .preflight import DataRootError, UnknownTypeError, check_data_roots, check_model_types
from .runner import build_runner, load_config, run_tool

__all__ = [
    'CheckpointError', 'CPUAutocastOptimWrapper', 'DataRootError', 'DeviceAwareDistributedDataParallel',
    'UnknownTypeError', 'UserError', 'adapt_config_to_device', 'check_data_roots',
    'build_runner', 'check_model_types', 'init_cpu_process_group', 'load_config',
    'load_local_checkpoint', 'run_tool'
]
