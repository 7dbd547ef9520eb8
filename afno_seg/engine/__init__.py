"""The mmengine extensions the tools need, registered on import; the names used outside."""
# ruff: noqa: F401
from . import random_state
from .atomic_io import SaveError, atomic_write, remove_stale_temp_files
from .checkpoint import CheckpointError
from .errors import UserError
from .numerics import NonFiniteLossError, NonFiniteLossHook
from .precision import PRECISIONS, CPUAutocastOptimWrapper
from .preflight import check_data_roots, check_model_types
from .runner import build_runner, load_config, run_test, run_tool, run_train, write_switched_config
