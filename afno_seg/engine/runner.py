"""What tools/train.py, tools/test.py and the study's steps share: config loading, preflight,
device adaptation, the train and test runs, and one line (no traceback) for the failures a long
run meets: bad input, a stop signal, a dead data loader worker, a dead rank."""
import gc
import logging
import os
import os.path as osp
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from contextvars import ContextVar
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.dist import get_rank, is_distributed
from mmengine.logging import MessageHub, print_log
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from ..decode_heads import use_low_res_fusion
from ..mixer_switch import resolve_config_path, spec_slug, switch_mixer
from .checkpoint import trusted_checkpoints, without_config_text
from .checkpoint_fit import CheckpointFitHook
from .checkpoint_hook import TrainingInterrupted, restart_count, stop_signals_released
from .cpu_memory import cache_freed_cpu_memory
from .dataloader_faults import (
    DEFAULT_TIMEOUT_S,
    TrackedDataset,
    explain_worker_failure,
    worker_init,
)
from .distributed import explain_collective_failure, init_cpu_process_group, record_peers
from .errors import UserError
from .precision import EAGER_STEP, apply_precision, apply_test_precision
from .preflight import check_before_runner, check_checkpoint, check_config_checkpoints
from .results import print_results, test_results, train_results

__all__ = ['AfnoSegRunner', 'adapt_config_to_device', 'build_runner', 'check_config_path',
           'load_config', 'run_test', 'run_tool', 'run_train', 'write_switched_config']

#: What mmengine's Config.fromfile reads, and the files the tools read as checkpoints.
CONFIG_SUFFIXES = ('.py', '.yml', '.yaml', '.json')
CHECKPOINT_SUFFIXES = ('.pth', '.pt', '.ckpt', '.safetensors', '.bin')
# True inside run_tool (a failure then ends the process); a context variable, so no state
# outlives the call.
_IN_TOOL: ContextVar[bool] = ContextVar('afno_seg_in_tool', default=False)


def load_config(config: str, launcher: str = 'none', cfg_options: dict | None = None,
                work_dir: str | None = None, *, mixer: str | None = None,
                pretrained: bool = True) -> Config:
    """``Config.fromfile`` of a path or ``mmseg::...`` config plus mmseg's tool conventions
    (``--cfg-options``, default work_dir), then ``--mixer`` (:func:`switch_mixer`; ``pretrained``
    False: no MiT weights named); a missing file is one :class:`UserError` line."""
    path = check_config_path(config)
    cfg = Config.fromfile(path)
    cfg.launcher = launcher
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    return switch_mixer(cfg, mixer, pretrained, default_work_dir=work_dir is None)


def check_config_path(config: str, checkpoint: str | None = None) -> str:
    """The file of ``config`` (``mmseg::`` resolved), refused in one line when it is missing or
    no config (mmengine reads .py/.yml/.yaml/.json; its own refusal is a traceback): a checkpoint
    given as the config, or config and ``checkpoint`` swapped, is named as such."""
    path = resolve_config_path(config)
    if Path(path).suffix in CONFIG_SUFFIXES:
        if not osp.isfile(path):
            raise UserError(f'config file not found: {config}')
        return path
    if checkpoint is not None and Path(checkpoint).suffix in CONFIG_SUFFIXES:
        raise UserError(f'{config} looks like a checkpoint and {checkpoint} like a config: '
                        'swap them (the config comes first, then the checkpoint)')
    looks = 'looks like a checkpoint' if Path(path).suffix in CHECKPOINT_SUFFIXES else 'is not one'
    raise UserError(f'{config}: a config is a {"/".join(CONFIG_SUFFIXES)} file and this {looks}; '
                    'the tools take the config first, then the checkpoint')


def write_switched_config(config: str, spec: str | None, out_dir: str,
                          cfg_options: dict | None = None) -> str:
    """The config a tool that reads a config file should use: ``config`` itself without a
    spec (``mmseg::`` resolved), else the derived config written as
    ``out_dir/<stem>_<spec>.py`` (``cfg_options`` merged into it). Returns its path."""
    if spec is None:
        return resolve_config_path(config)
    cfg = load_config(config, cfg_options=cfg_options, mixer=spec, pretrained=False)
    path = Path(out_dir) / f'{Path(cfg.filename).stem}_{spec_slug(spec)}.py'
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg.dump(str(path))
    return str(path)


def adapt_config_to_device(cfg: Config, distributed: bool = False,
                           cuda_available: bool | None = None,
                           precision: str | None = 'auto') -> Config:
    """Rewrite ``cfg``, written for GPU clusters (8 GPUs, fp16, SyncBN), in place for the device
    and return it, logging what changed: the precision (:func:`.apply_precision`; None: the
    optimizer wrapper as it is, for a run that does not train), and without CUDA for distributed
    runs gloo and mmengine's DDP wrapper with ``device_ids=None`` (the Runner's default passes
    ``[LOCAL_RANK]``, which DDP refuses for CPU modules). SyncBN becomes BatchNorm once the model
    is built (:class:`AfnoSegRunner`)."""
    cuda_available = torch.cuda.is_available() if cuda_available is None else cuda_available
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


@RUNNERS.register_module()
class AfnoSegRunner(Runner):
    """mmengine's ``Runner`` as the tools run it (``runner_type='AfnoSegRunner'``): ``train()``
    releases the stop signals however it ends; without CUDA SyncBN runs as BatchNorm (no CPU
    kernel); loaders with workers get a ``timeout`` (unless the config sets one; 0: none), a
    :class:`~.dataloader_faults.TrackedDataset` and :func:`~.dataloader_faults.worker_init`
    (unless the config sets a ``worker_init_fn``); with ``compile=True`` the optimizer wrapper's
    type is one whose ``update_params`` stays eager (:data:`~.precision.EAGER_STEP`)."""

    def train(self, *args, **kwargs):
        """``Runner.train``, then the stop-signal handlers given back however it ended, so a
        process that goes on (a test session) gets SIGTERM/SIGINT back. Inside :func:`run_tool` a
        failure sets them to ``SIG_IGN`` instead: the tool exits after its one-line message, which
        torchrun's SIGTERM to the survivors of a dead rank must not cut short. (No hook can:
        mmengine calls none on an exception.)"""
        with stop_signals_released(ignore_on_error=_IN_TOOL.get()):
            return super().train(*args, **kwargs)

    def load_checkpoint(self, filename, *args, **kwargs):
        """``Runner.load_checkpoint`` whose result holds no config text where mmengine's
        ``resume`` would execute it (``Config.fromstring(meta['config'])``): the registered loader
        drops it already; this also covers a loader someone else registers for a prefix."""
        return without_config_text(super().load_checkpoint(filename, *args, **kwargs))

    def build_model(self, model):
        model = super().build_model(model)
        if torch.cuda.is_available():
            return model
        count = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
        if count:
            print_log(f'[afno_seg] no CUDA device: {count} SyncBN layer(s) run as BatchNorm.',
                      logger='current', level=logging.WARNING)
        return revert_sync_batchnorm(model)

    def build_optim_wrapper(self, optim_wrapper):
        if self.cfg.get('compile') and isinstance(optim_wrapper, dict):
            kind = optim_wrapper.get('type', 'OptimWrapper')
            optim_wrapper = {**optim_wrapper, 'type': EAGER_STEP.get(kind, kind)}
        return super().build_optim_wrapper(optim_wrapper)

    def build_dataloader(self, dataloader, seed=None, diff_rank_seed=False):
        workers = dataloader.get('num_workers', 0) if isinstance(dataloader, dict) else 0
        if workers and 'worker_init_fn' not in dataloader:  # (dataloader_faults)
            timeout = dataloader.get('timeout', DEFAULT_TIMEOUT_S)
            dataloader = {**dataloader, 'timeout': timeout, 'dataset': dict(
                type=TrackedDataset, dataset=dataloader['dataset'], num_workers=workers,
                timeout=timeout), 'worker_init_fn': dict(type=worker_init, num_workers=workers,
                                                         rank=get_rank(), seed=seed)}
        return super().build_dataloader(dataloader, seed, diff_rank_seed)


def _runner_class(cfg: Config) -> type[Runner]:
    """:class:`AfnoSegRunner`, or the config's ``runner_type`` if that subclasses it."""
    name = runner = cfg.get('runner_type', 'AfnoSegRunner')
    if isinstance(name, str):
        with RUNNERS.switch_scope_and_registry(cfg.get('_scope_')) as registry:
            runner = registry.get(name)
        if runner is None:
            raise UserError(f'runner_type={name!r} is not a registered runner; check the name, '
                            'or import the module that registers it (custom_imports)')
    if not (isinstance(runner, type) and issubclass(runner, AfnoSegRunner)):
        raise UserError(f'runner_type={name!r}: the tools need a subclass of '
                        'afno_seg.engine.AfnoSegRunner (stop signals, SyncBN on a CPU); '
                        'derive it from that class instead of mmengine\'s Runner')
    return runner


def build_runner(cfg: Config, loaders: Sequence[str], precision: str = 'auto') -> Runner:
    """Check data, work_dir, model types; adapt to the device and ``precision`` (on a CPU also
    the allocator, :mod:`.cpu_memory`), join a CPU process group (``--launcher pytorch`` or
    ``slurm``), build an :class:`AfnoSegRunner`; ranks note each other (:func:`.record_peers`)."""
    check_before_runner(cfg, loaders)
    # a test run builds no optimizer wrapper
    adapt_config_to_device(cfg, distributed=cfg.launcher != 'none',
                           precision=precision if 'train_dataloader' in loaders else None)
    if not torch.cuda.is_available():
        cache_freed_cpu_memory()  # large activations re-used, not page-faulted anew each step
        if cfg.launcher in ('pytorch', 'slurm'):
            dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
            init_cpu_process_group(dist_cfg.get('timeout'), cfg.launcher, dist_cfg.get('port'))
        elif cfg.launcher == 'mpi':  # mmengine's MPI start calls torch.cuda.set_device
            raise UserError('--launcher mpi needs CUDA; on CPUs use --launcher pytorch '
                            '(tools/dist_train.sh) or slurm (tools/slurm_train.sh)')
    runner = _runner_class(cfg).from_cfg(cfg)
    record_peers()
    return runner


def run_train(config: str, work_dir: str | None = None, cfg_options: dict | None = None, *,
              launcher: str = 'none', resume: bool = False, precision: str = 'auto',
              mixer: str | None = None, from_scratch: bool = False, trust: bool = False,
              edit: Callable[[Config], None] | None = None) -> None:
    """What ``tools/train.py`` runs, its flags as arguments: load ``config`` (a path or
    ``mmseg::...``; ``mixer`` as ``--mixer``), ``edit(cfg)`` it (``--amp``), resume when asked or
    restarted by torchrun/Slurm, check the checkpoints it names, build the runner, train."""
    cfg = load_config(config, launcher, cfg_options, work_dir, mixer=mixer)
    if edit is not None:
        edit(cfg)
    restarted = restart_count()
    if restarted and not resume:
        print_log(f'restart {restarted[1]} by {restarted[0]}: resuming from the checkpoint that '
                  f'{cfg.work_dir}/last_checkpoint names (as --resume does)', logger='current',
                  level=logging.WARNING)
    cfg.resume = resume or restarted is not None
    check_config_checkpoints(cfg, cfg.resume, from_scratch, trust)
    loaders = ['train_dataloader'] + (['val_dataloader'] if cfg.get('val_cfg') else [])
    runner = build_runner(cfg, loaders, precision)
    runner.register_hook(CheckpointFitHook(strict=False))  # one summary line per loaded file
    with trusted_checkpoints(trust):
        runner.train()
    print_results(train_results(runner))


def run_test(config: str, checkpoint: str, work_dir: str | None = None,
             cfg_options: dict | None = None, *, launcher: str = 'none',
             precision: str = 'auto', mixer: str | None = None, trust: bool = False,
             edit: Callable[[Config], None] | None = None) -> None:
    """What ``tools/test.py`` runs, its flags as arguments: check ``checkpoint``, load ``config``
    as :func:`run_train` does, ``edit(cfg)`` it (``--tta``, ``--show``, ...), evaluate in
    ``precision``; a checkpoint that does not fit the model is refused, not evaluated with random
    weights."""
    check_config_path(config, checkpoint)  # swapped arguments named before either is read
    if not trust:
        check_checkpoint(checkpoint)  # a bad/unsafe file named at once, before the Runner
    cfg = load_config(config, launcher, cfg_options, work_dir, mixer=mixer, pretrained=False)
    cfg.load_from = checkpoint
    use_low_res_fusion(cfg.model)  # mmseg's SegformerHead, same weights and values, 1/3 the work
    if edit is not None:
        edit(cfg)
    apply_test_precision(cfg, precision)
    runner = build_runner(cfg, ['test_dataloader'])
    runner.register_hook(CheckpointFitHook(strict=True,
                                           new_prefixes=cfg.get('checkpoint_new_keys', ())))
    with trusted_checkpoints(trust):
        metrics = runner.test()
    print_results(test_results(runner, metrics))


def run_tool(main: Callable[[], None]) -> int:
    """Run a tool's main and return its exit status (main's own when it returns an int): 1 with
    the message alone on stderr for a :class:`UserError`, a dead or stuck data-loader worker or
    a dead rank; 75 for a stop signal (:class:`~.checkpoint_hook.TrainingInterrupted`, logged by the
    checkpoint hook).

    A torchrun child then leaves without interpreter finalization (output and logs flushed):
    gloo's threads, still referenced by DDP objects only the garbage collector frees, could
    otherwise abort the finished rank at exit (SIGABRT, "terminate called without an active
    exception")."""
    code, peers_lost = 0, False
    token = _IN_TOOL.set(True)
    try:
        result = main()
        code = result if isinstance(result, int) else 0
    except TrainingInterrupted as stop:
        code = stop.exit_code
    except Exception as error:
        message = str(error) if isinstance(error, UserError) else explain_worker_failure(error)
        if message is None:
            message = explain_collective_failure(error, _current_iteration())
            peers_lost = message is not None
        if message is None:
            raise
        print(f'error: {message}', file=sys.stderr)
        code = 1
    finally:
        _IN_TOOL.reset(token)
        if is_distributed() and not peers_lost:
            _leave_process_group()
    # A peer is gone: destroying the group could wait for it; leave at once (bounded exit).
    # torchrun's children and Slurm's tasks: a fast exit also narrows srun's kill-on-bad-exit
    # window after a 75 (docs/install.md)
    if peers_lost or 'TORCHELASTIC_RUN_ID' in os.environ or 'SLURM_STEP_ID' in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code


def _current_iteration() -> int | None:
    """The training iteration running now (mmengine's runtime info), if any."""
    iteration = MessageHub.get_current_instance().get_info('iter')  # None: not training
    return None if iteration is None else iteration + 1


def _leave_process_group() -> None:
    """Wait for every rank, free the cycles that hold DDP's reducer, then destroy the group."""
    with suppress(RuntimeError):  # a peer already failed: leave anyway
        torch.distributed.barrier()
    gc.collect()
    torch.distributed.destroy_process_group()
