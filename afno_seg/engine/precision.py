"""``--precision {auto,fp16,bf16,fp32}`` trains and tests in that precision on any device
(mmengine's ``AmpOptimWrapper`` runs on a GPU only). ``auto``: the config's on CUDA, fp32 on a
CPU, where bfloat16 and float16 are mostly emulated, many times slower (BENCHMARKS.md).
"""
import logging
from contextlib import contextmanager

import torch
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

from .errors import UserError

__all__ = ['EAGER_STEP', 'PRECISIONS', 'CPUAutocastOptimWrapper', 'apply_precision',
           'apply_test_precision', 'choose_precision', 'config_precision']

PRECISIONS = ('auto', 'fp16', 'bf16', 'fp32')
_WRAPPERS = ('OptimWrapper', 'AmpOptimWrapper', 'CPUAutocastOptimWrapper')
# What mmengine's TestLoop(fp16=True) autocasts to (its runner.amp.autocast), by CUDA or not.
TEST_LOOP_PRECISION = {True: 'fp16', False: 'bf16'}


def config_precision(cfg: Config) -> str:
    """'fp16', 'bf16' or 'fp32': what the config's ``optim_wrapper`` trains in."""
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') not in _WRAPPERS[1:]:
        return 'fp32'
    default = 'bfloat16' if wrapper['type'] == 'CPUAutocastOptimWrapper' else 'float16'
    return 'bf16' if 'bfloat16' in str(wrapper.get('dtype') or default) else 'fp16'


def choose_precision(requested: str, configured: str, cuda: bool) -> tuple[str, str]:
    """The precision to run, and why in words, for ``requested`` and the config's own."""
    if requested not in PRECISIONS:
        raise UserError(f'--precision {requested}: choose one of {", ".join(PRECISIONS)}')
    device = 'CUDA' if cuda else 'a CPU'
    if requested == 'auto' and (cuda or configured == 'fp32'):
        return configured, f'auto: the config\'s {configured} on {device}'
    if requested == 'auto':
        return 'fp32', (f'auto: the config\'s {configured} as fp32 on a CPU, where it is mostly '
                        f'emulated, many times slower; --precision {configured} forces it')
    if requested != 'fp32' and not cuda:
        return requested, (f'--precision {requested}: emulated unless this CPU has native '
                           'support, many times slower than fp32')
    return requested, f'--precision {requested} on {device}'


def apply_precision(cfg: Config, requested: str = 'auto', cuda: bool | None = None) -> str:
    """Rewrite ``cfg.optim_wrapper`` to train in the chosen precision, log it in one line and
    return it ('fp16', 'bf16' or 'fp32')."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    wrapper = cfg.get('optim_wrapper')
    if wrapper is None:
        return 'fp32'
    if requested != 'auto' and wrapper.get('type') not in _WRAPPERS:
        raise UserError(f'--precision {requested} needs optim_wrapper.type in {_WRAPPERS}; the '
                        f'config has {wrapper.get("type")!r}')
    configured = config_precision(cfg)
    chosen, why = choose_precision(requested, configured, cuda)
    # AmpOptimWrapper refuses to run without a GPU: replaced even at its own dtype (and back).
    if chosen != configured or wrapper.get('type') == _WRAPPERS[2 if cuda else 1]:
        for key in ('dtype', 'use_fsdp') + (('loss_scale',) if chosen != 'fp16' else ()):
            wrapper.pop(key, None)
        wrapper['type'] = 'OptimWrapper' if chosen == 'fp32' else _WRAPPERS[1 if cuda else 2]
        if chosen != 'fp32':
            wrapper['dtype'] = 'float16' if chosen == 'fp16' else 'bfloat16'
        if chosen == 'fp16':
            wrapper.setdefault('loss_scale', 'dynamic')
    quiet = chosen == configured and 'emulated' not in why
    print_log(f'[afno_seg] precision {chosen} ({why}): optim_wrapper {wrapper["type"]}',
              logger='current', level=logging.INFO if quiet else logging.WARNING)
    return chosen


# Under compile=True mmengine compiles the whole train_step; traced, the optimizer step fails in
# torch 2.14 on mmengine's ConfigDict param groups, and a learning rate changing every iteration
# would recompile. AfnoSegRunner builds these under compile in place of the config's type.
_eager_update_params = torch.compiler.disable(OptimWrapper.update_params)


@OPTIM_WRAPPERS.register_module()
class EagerStepOptimWrapper(OptimWrapper):
    """``OptimWrapper`` whose ``update_params`` stays eager under ``compile``."""
    update_params = _eager_update_params


@OPTIM_WRAPPERS.register_module()
class EagerStepAmpOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` whose ``update_params`` stays eager under ``compile``."""
    update_params = _eager_update_params


EAGER_STEP = dict(OptimWrapper='EagerStepOptimWrapper', AmpOptimWrapper='EagerStepAmpOptimWrapper')


@OPTIM_WRAPPERS.register_module()
class CPUAutocastOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` on a CPU (mmengine's asserts a GPU in ``__init__``, which this one
    replaces, setting the ``_scale_update_param`` its ``step`` reads: docs/private_apis.md):
    ``torch.autocast('cpu', dtype)``, float16 loss-scaled by ``torch.amp.GradScaler('cpu')``.

    Args:
        dtype (str): ``'float16'`` or ``'bfloat16'`` (no loss scale). Default: 'bfloat16'.
        loss_scale (str | float | dict): As ``AmpOptimWrapper``'s. Default: 'dynamic'.
        **kwargs: Passed to :class:`mmengine.optim.OptimWrapper`.
    """

    def __init__(self, dtype: str = 'bfloat16', loss_scale='dynamic', **kwargs) -> None:
        OptimWrapper.__init__(self, **kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if self.cast_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f'CPUAutocastOptimWrapper: dtype float16 or bfloat16, not {dtype}')
        self._scale_update_param = loss_scale if isinstance(loss_scale, float) else None
        scaler_args = dict(init_scale=loss_scale) if isinstance(loss_scale, float) else \
            {} if loss_scale == 'dynamic' else dict(loss_scale)
        self.loss_scaler = torch.amp.GradScaler(
            'cpu', enabled=self.cast_dtype == torch.float16, **scaler_args)

    update_params = _eager_update_params

    def state_dict(self) -> dict:
        state = super().state_dict()
        if not self.loss_scaler.is_enabled():  # {}: an fp16 resume could not load it
            state.pop('loss_scaler', None)
        return state

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with OptimWrapper.optim_context(self, model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield


def apply_test_precision(cfg: Config, requested: str = 'auto', cuda: bool | None = None) -> str:
    """Set ``cfg.test_cfg.fp16`` to evaluate in the chosen precision and log it; mmengine's
    ``TestLoop(fp16=True)`` autocasts to float16 on CUDA, bfloat16 on a CPU: others refused."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    test_cfg = cfg.get('test_cfg') or {}
    configured = 'fp16' if test_cfg.get('fp16') else 'fp32'
    if requested == 'auto' and configured == 'fp32':
        return 'fp32'
    chosen, reason = choose_precision(requested, configured, cuda)
    if chosen not in ('fp32', TEST_LOOP_PRECISION[cuda]):
        raise UserError(f'--precision {chosen}: tools/test.py evaluates through mmengine\'s '
                        f'TestLoop, which autocasts to {TEST_LOOP_PRECISION[cuda]} on '
                        f'{"CUDA" if cuda else "a CPU"}; choose that or fp32')
    test_cfg['fp16'] = chosen != 'fp32'
    cfg.test_cfg = test_cfg
    print_log(f'[afno_seg] test precision {chosen} ({reason})', logger='current',
              level=logging.INFO if chosen == configured else logging.WARNING)
    return chosen
