"""``--precision {auto,fp16,bf16,fp32}`` trains in that precision on any device (mmengine's AMP is
GPU-only); ``auto``: the config's on CUDA, fp32 on a CPU (where the others are mostly emulated)."""
import logging
from contextlib import contextmanager

import torch
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

from .errors import UserError

__all__ = ['PRECISIONS', 'CPUAutocastOptimWrapper', 'apply_precision']

PRECISIONS = ('auto', 'fp16', 'bf16', 'fp32')
_WRAPPERS = ('OptimWrapper', 'AmpOptimWrapper', 'CPUAutocastOptimWrapper')


def apply_precision(cfg: Config, requested: str = 'auto', cuda: bool | None = None) -> str:
    """Rewrite ``cfg.optim_wrapper`` to train in ``requested`` on this device (``cuda`` None:
    torch's answer), log the choice and why in one line and return it: fp16, bf16 or fp32."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if requested not in PRECISIONS:
        raise UserError(f'--precision {requested}: choose one of {", ".join(PRECISIONS)}')
    wrapper = cfg.get('optim_wrapper')
    if wrapper is None:
        return 'fp32'
    kind = wrapper.setdefault('type', 'OptimWrapper')  # mmengine's default
    if requested != 'auto' and kind not in _WRAPPERS:
        raise UserError(f'--precision {requested} needs optim_wrapper.type in {_WRAPPERS}; the '
                        f'config has {kind!r}')
    dtype = str(wrapper.get('dtype') or ('bfloat16' if kind == _WRAPPERS[2] else 'float16'))
    configured = 'fp32' if kind not in _WRAPPERS[1:] else 'bf16' if 'bfloat16' in dtype else 'fp16'
    chosen = requested if requested != 'auto' else configured if cuda else 'fp32'
    why = f'auto: the config\'s {configured}' if requested == 'auto' else f'--precision {chosen}'
    if chosen != configured and requested == 'auto':
        why += (f' as fp32 on a CPU, where it is mostly emulated, many times slower; --precision '
                f'{configured} forces it')
    elif chosen != 'fp32' and not cuda:
        why += ': emulated unless this CPU has native support, many times slower than fp32'
    else:
        why += f' on {"CUDA" if cuda else "a CPU"}'
    # AmpOptimWrapper refuses to run without a GPU: replaced even at its own dtype (and back).
    if chosen != configured or kind == _WRAPPERS[2 if cuda else 1]:
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


# compile=True traces mmengine's train_step, whose optimizer step fails on ConfigDict param groups
# (torch 2.14) or recompiles as the learning rate moves: AfnoSegRunner builds EagerStep<type>.
_eager_update_params = torch.compiler.disable(OptimWrapper.update_params)


@OPTIM_WRAPPERS.register_module()
class EagerStepOptimWrapper(OptimWrapper):
    """``OptimWrapper`` whose ``update_params`` stays eager under ``compile``."""
    update_params = _eager_update_params


@OPTIM_WRAPPERS.register_module()
class EagerStepAmpOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` whose ``update_params`` stays eager under ``compile``."""
    update_params = _eager_update_params


@OPTIM_WRAPPERS.register_module()
class CPUAutocastOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` on a CPU: ``torch.autocast('cpu', dtype)`` (float16 or bfloat16), float16
    loss-scaled (``loss_scale`` as mmengine's); its own ``__init__`` (mmengine's asserts a GPU) sets
    the ``_scale_update_param`` that ``step`` reads (docs/private_apis.md)."""

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

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with OptimWrapper.optim_context(self, model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield

