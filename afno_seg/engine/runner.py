"""tools/train.py and tools/test.py as functions: bad input, a stop signal, a dead loader worker or
rank end in one line and an exit status, not mmengine's traceback; GPU configs run on a CPU."""
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
from . import cpu_memory, preflight, results
from . import dataloader_faults as faults
from .checkpoint import trusted_checkpoints, without_config_text
from .checkpoint_fit import CheckpointFitHook
from .checkpoint_hook import TrainingInterrupted, restart_count, stop_signals_released
from .console import VERBOSE, print_header, quiet_console
from .distributed import explain_collective_failure, init_cpu_process_group, record_peers
from .errors import UserError
from .precision import apply_precision

__all__ = ['AfnoSegRunner', 'adapt_config_to_device', 'build_runner', 'check_config_path',
           'load_config', 'run_test', 'run_tool', 'run_train', 'write_switched_config']

CONFIG_SUFFIXES = ('.py', '.yml', '.yaml', '.json')  # what Config.fromfile reads
CHECKPOINT_SUFFIXES = ('.pth', '.pt', '.ckpt', '.safetensors', '.bin')
_IN_TOOL: ContextVar[bool] = ContextVar('afno_seg_in_tool', default=False)  # inside run_tool


def check_config_path(config: str, checkpoint: str | None = None) -> str:
    """The file of ``config`` (``mmseg::`` resolved); a missing one or a checkpoint: one line."""
    path = resolve_config_path(config)
    if Path(path).suffix in CONFIG_SUFFIXES and Path(path).is_file():
        return path
    if Path(path).suffix in CONFIG_SUFFIXES:
        raise UserError(f'config file not found: {config}')
    if checkpoint is not None and Path(checkpoint).suffix in CONFIG_SUFFIXES:
        raise UserError(f'{config} looks like a checkpoint and {checkpoint} like a config: '
                        'swap them (the config comes first, then the checkpoint)')
    looks = 'looks like a checkpoint' if Path(path).suffix in CHECKPOINT_SUFFIXES else 'is not one'
    raise UserError(f'{config}: a config is a {"/".join(CONFIG_SUFFIXES)} file and this {looks}; '
                    'the tools take the config first, then the checkpoint')


def load_config(config: str, launcher: str = 'none', cfg_options: dict | None = None,
                work_dir: str | None = None, *, mixer: str | None = None,
                pretrained: bool = True, checkpoint: str | None = None) -> Config:
    """``Config.fromfile`` (:func:`check_config_path` first) with mmseg's tool conventions (checked
    ``--cfg-options``, default work_dir), then ``--mixer`` (``pretrained`` False: no MiT file)."""
    cfg = Config.fromfile(check_config_path(config, checkpoint))
    cfg.launcher = launcher
    preflight.check_option_keys(cfg, cfg_options)
    cfg.merge_from_dict(cfg_options or {})
    cfg.work_dir = work_dir or cfg.get('work_dir', None) or f'./work_dirs/{Path(cfg.filename).stem}'
    return switch_mixer(cfg, mixer, pretrained, default_work_dir=work_dir is None)


def write_switched_config(config: str, spec: str | None, out_dir: str,
                          cfg_options: dict | None = None) -> str:
    """The path of ``config`` itself without a mixer ``spec``, else of the derived config,
    written as ``out_dir/<stem>_<spec>.py`` (``out_dir`` exists; ``cfg_options`` merged)."""
    if spec is None:
        return resolve_config_path(config)
    cfg = load_config(config, cfg_options=cfg_options, mixer=spec, pretrained=False)
    path = Path(out_dir) / f'{Path(cfg.filename).stem}_{spec_slug(spec)}.py'
    cfg.dump(str(path))
    return str(path)


def adapt_config_to_device(cfg: Config, distributed: bool, cuda: bool) -> None:
    """Distributed without CUDA: gloo and DDP with ``device_ids=None`` (not LOCAL_RANK), logged."""
    if cuda or not distributed:
        return
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
    wrapper = cfg.get('model_wrapper_cfg') or dict(  # mmengine's default wrapping, less the GPU
        type='MMDistributedDataParallel', broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    if wrapper.get('type') == 'MMDistributedDataParallel':
        cfg.model_wrapper_cfg = {**wrapper, 'device_ids': None}
    print_log('[afno_seg] no CUDA device: distributed backend gloo, DDP on CPU modules.',
              logger='current', level=logging.WARNING)


@RUNNERS.register_module()
class AfnoSegRunner(Runner):
    """mmengine's ``Runner`` as the tools run it: stop signals released however ``train()`` ends, a
    quiet console, SyncBN as BatchNorm on a CPU, loader workers tracked, ``compile``: eager step."""

    def train(self, *args, **kwargs):
        # No hook can: mmengine calls none on an exception. Inside run_tool a failure ignores them
        # instead: torchrun's SIGTERM to a dead rank's survivors must not cut their message short.
        with stop_signals_released(ignore_on_error=_IN_TOOL.get()):
            return super().train(*args, **kwargs)

    def build_logger(self, *args, **kwargs):
        return quiet_console(super().build_logger(*args, **kwargs))  # unless --verbose

    def load_checkpoint(self, filename, *args, **kwargs):
        # Runner.resume executes meta['config']: dropped whatever loader serves the prefix.
        return without_config_text(super().load_checkpoint(filename, *args, **kwargs))

    def build_model(self, model):
        model = super().build_model(model)
        if torch.cuda.is_available():
            return model
        if any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()):
            print_log('[afno_seg] no CUDA device: SyncBN runs as BatchNorm.', logger='current',
                      level=logging.WARNING)
        return revert_sync_batchnorm(model)

    def build_optim_wrapper(self, optim_wrapper):
        if self.cfg.get('compile') and isinstance(optim_wrapper, dict):
            kind = optim_wrapper.get('type', 'OptimWrapper')
            eager = kind in ('OptimWrapper', 'AmpOptimWrapper')  # precision.py's EagerStep*
            optim_wrapper = {**optim_wrapper, 'type': f'EagerStep{kind}' if eager else kind}
        return super().build_optim_wrapper(optim_wrapper)

    def build_dataloader(self, dataloader, seed=None, diff_rank_seed=False):
        workers = dataloader.get('num_workers', 0) if isinstance(dataloader, dict) else 0
        if workers and 'worker_init_fn' not in dataloader:
            timeout = dataloader.get('timeout', faults.DEFAULT_TIMEOUT_S)
            dataloader = {**dataloader, 'timeout': timeout, 'dataset': dict(
                type=faults.TrackedDataset, dataset=dataloader['dataset'], num_workers=workers,
                timeout=timeout), 'worker_init_fn': dict(
                type=faults.worker_init, num_workers=workers, rank=get_rank(), seed=seed)}
        return super().build_dataloader(dataloader, seed, diff_rank_seed)


def build_runner(cfg: Config, loaders: Sequence[str], precision: str = 'auto', *,
                 overwrite: bool | None = None) -> Runner:
    """Check ``cfg`` (:mod:`.preflight`; ``overwrite`` not None: ``claim_work_dir``), train in
    ``precision``, adapt to a CPU, build an :class:`AfnoSegRunner` and print the run's header."""
    cuda, training = torch.cuda.is_available(), 'train_dataloader' in loaders
    preflight.check_data_roots(cfg, loaders)
    preflight.check_model_types(cfg)
    preflight.check_loop_keys(cfg, [name.replace('_dataloader', '_cfg') for name in loaders])
    preflight.check_loaders(cfg, loaders, cuda)
    preflight.check_work_dir(cfg.work_dir)
    if overwrite is not None:
        preflight.claim_work_dir(cfg, overwrite)
    chosen = apply_precision(cfg, precision, cuda) if training else \
        'fp16 autocast' if (cfg.get('test_cfg') or {}).get('fp16') else 'fp32'
    adapt_config_to_device(cfg, cfg.launcher != 'none', cuda)
    if not cuda:
        cpu_memory.cache_freed_cpu_memory()
    if not cuda and cfg.launcher in ('pytorch', 'slurm'):
        dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
        init_cpu_process_group(dist_cfg.get('timeout'), cfg.launcher, dist_cfg.get('port'))
    runner = AfnoSegRunner.from_cfg(cfg)
    record_peers()
    print_header(runner, 'train' if training else 'test', chosen)
    return runner


def run_train(config: str, work_dir: str | None = None, cfg_options: dict | None = None, *,
              launcher: str = 'none', resume: bool = False, overwrite: bool = False,
              precision: str = 'auto', mixer: str | None = None, from_scratch: bool = False,
              trust: bool = False, verbose: bool = False,
              edit: Callable[[Config], None] | None = None) -> None:
    """``tools/train.py``, its flags as arguments (``edit(cfg)``: ``--amp``); a torchrun or
    Slurm restart resumes as ``--resume`` does; a finished run to resume is reported, not run."""
    VERBOSE.set(verbose)
    cfg = load_config(config, launcher, cfg_options, work_dir, mixer=mixer)
    if edit is not None:
        edit(cfg)
    if resume and overwrite:
        raise UserError('--resume continues the run in the work_dir, --overwrite starts it over: '
                        'pick one')
    restarted = restart_count()
    if restarted and not resume:
        print_log(f'restart {restarted[1]} by {restarted[0]}: resuming from the checkpoint that '
                  f'{cfg.work_dir}/last_checkpoint names (as --resume does)', logger='current',
                  level=logging.WARNING)
    cfg.resume = resume or restarted is not None
    if cfg.resume and (done := preflight.finished_run(cfg)):
        print_log(f'{cfg.work_dir} holds a finished run: {done} ends its schedule, nothing to '
                  'train (raise train_cfg.max_iters to train on, or --overwrite to start over)',
                  logger='current')
        config_file = osp.join(cfg.work_dir, osp.basename(cfg.filename))
        return results.print_results([('checkpoint', done)] +
                                     [('config', config_file)] * osp.isfile(config_file))
    preflight.check_pretrained(cfg, from_scratch)
    last = cfg.resume and osp.isfile(osp.join(cfg.work_dir, 'last_checkpoint')) and cfg.work_dir
    preflight.check_checkpoint(cfg.get('load_from') or last, '--resume checkpoint' if cfg.resume
                               else 'load_from', training=cfg.resume)
    loaders = ['train_dataloader'] + (['val_dataloader'] if cfg.get('val_cfg') else [])
    runner = build_runner(cfg, loaders, precision, overwrite=overwrite)
    with trusted_checkpoints(trust):
        runner.train()
    results.print_results(results.train_results(runner))


def run_test(config: str, checkpoint: str, work_dir: str | None = None,
             cfg_options: dict | None = None, *, launcher: str = 'none', mixer: str | None = None,
             trust: bool = False, verbose: bool = False,
             edit: Callable[[Config], None] | None = None) -> None:
    """``tools/test.py``, its flags as arguments (``edit(cfg)``: ``--tta``, ``--show``, ...); a
    checkpoint that does not fit the model is refused, not evaluated with random weights."""
    VERBOSE.set(verbose)
    cfg = load_config(config, launcher, cfg_options, work_dir, mixer=mixer, pretrained=False,
                      checkpoint=checkpoint)
    preflight.check_checkpoint(checkpoint, 'checkpoint')
    cfg.load_from = checkpoint
    use_low_res_fusion(cfg.model)  # mmseg's SegformerHead, same weights and values, 1/3 the work
    if edit is not None:
        edit(cfg)
    runner = build_runner(cfg, ['test_dataloader'])
    runner.register_hook(CheckpointFitHook(cfg.get('checkpoint_new_keys', ())))
    with trusted_checkpoints(trust):
        metrics = runner.test()
    results.print_results(results.test_results(runner, metrics))


def run_tool(main: Callable[[], None]) -> int:
    """A tool's main as its exit status (its int, else 0): 1, the message alone on stderr, for a
    :class:`UserError`, a dead or stuck loader worker, a dead rank; 75 for a stop signal."""
    code, peers_lost, failed, token = 0, False, False, _IN_TOOL.set(True)
    try:
        code = result if isinstance(result := main(), int) else 0
    except TrainingInterrupted as stop:
        code = stop.exit_code
    except Exception as error:
        failed = True
        message = str(error) if isinstance(error, UserError) else \
            faults.explain_worker_failure(error)
        if message is None:
            iteration = MessageHub.get_current_instance().get_info('iter')  # None: no training
            message = explain_collective_failure(error, None if iteration is None else
                                                 iteration + 1)
            peers_lost = message is not None
        if message is None:
            raise
        print(f'error: {message}', file=sys.stderr)
        code = 1
    finally:
        _IN_TOOL.reset(token)
        if is_distributed() and not peers_lost:
            with suppress(RuntimeError):  # a peer failed during it: leave anyway
                if not failed:  # after a failure the others may hang in a collective
                    torch.distributed.barrier()
            gc.collect()  # the cycles that hold DDP's reducer
            torch.distributed.destroy_process_group()
    # At once when a peer is lost (destroying the group could wait for it), and in torchrun's and
    # Slurm's ranks (gloo threads could abort at exit; srun kills on a bad exit after a 75).
    if peers_lost or 'TORCHELASTIC_RUN_ID' in os.environ or 'SLURM_STEP_ID' in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code
