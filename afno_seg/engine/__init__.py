"""Small OpenMMLab extensions the stack lacks; importing this module registers them: the safe
checkpoint loader and the atomic file backend, the checkpoint, random-state and non-finite-loss
hooks, the CPU autocast optim wrappers, and :class:`AfnoSegRunner`."""
from . import random_state  # noqa: F401  (registers RandomStateHook)
from .atomic_io import AtomicLocalBackend, SaveError, atomic_write, remove_stale_temp_files
from .checkpoint import CheckpointError
from .checkpoint_hook import AtomicCheckpointHook
from .errors import UserError
from .numerics import NonFiniteLossError, NonFiniteLossHook
from .precision import PRECISIONS, CPUAutocastOptimWrapper, apply_precision
from .preflight import (
    DataRootError,
    EmptySplitError,
    UnknownTypeError,
    WorkDirError,
    check_data_roots,
    check_model_types,
)
from .runner import (
    AfnoSegRunner,
    adapt_config_to_device,
    build_runner,
    load_config,
    run_test,
    run_tool,
    run_train,
    write_switched_config,
)

__all__ = [
    'adapt_config_to_device', 'AfnoSegRunner', 'apply_precision', 'atomic_write',
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'build_runner', 'check_data_roots',
    'check_model_types', 'CheckpointError', 'CPUAutocastOptimWrapper', 'DataRootError',
    'EmptySplitError', 'load_config',
    'NonFiniteLossError', 'NonFiniteLossHook', 'PRECISIONS', 'remove_stale_temp_files', 'run_test',
    'run_tool', 'run_train', 'SaveError', 'UnknownTypeError', 'UserError', 'WorkDirError',
    'write_switched_config'
]
