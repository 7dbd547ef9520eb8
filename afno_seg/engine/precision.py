"""``--precision {auto,fp16,bf16,fp32}`` trains (and tests) in the chosen precision on any device
(mmengine's ``AmpOptimWrapper`` runs only on a GPU).

The configs train as written for GPUs: float16 autocast with a dynamic loss scale
(``AmpOptimWrapper``). ``fp16`` runs that, on a CPU through :class:`CPUAutocastOptimWrapper`
(the GPU's scale, growth, back-off and skipped steps); ``bf16`` is bfloat16 autocast without a
loss scale; ``fp32`` is ``OptimWrapper``. ``auto`` is the config's on CUDA and fp32 on every CPU:
emulated (no ``avx512_bf16``/``amx_bf16``/Arm ``bf16`` flag) a bfloat16 or float16 matmul is
10-65x slower than float32, and where native a B3 step in bfloat16 was still no faster (its
float32 spectral islands and casts eat the gain; BENCHMARKS.md). The CPU's flags only decide the
warning on an explicitly requested emulated precision. A precision the device cannot run is a
:class:`~.errors.UserError` naming what is available, never a silent switch.
``tools/test.py --precision`` evaluates under the same choice where mmengine's ``TestLoop`` can.
"""
import contextlib
import functools
import logging
import warnings
from contextlib import contextmanager

import torch
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

from .errors import UserError

__all__ = ['EAGER_STEP', 'PRECISIONS', 'CPUAutocastOptimWrapper', 'apply_precision',
           'apply_test_precision', 'choose_precision', 'config_precision', 'cpu_flags']

PRECISIONS = ('auto', 'fp16', 'bf16', 'fp32')
DTYPES = {'fp16': torch.float16, 'bf16': torch.bfloat16}
# /proc/cpuinfo flags (x86 "flags", Arm "Features") of hardware that computes these natively.
NATIVE_CPU_FLAGS = {'bf16': ('avx512_bf16', 'amx_bf16', 'bf16'),
                    'fp16': ('avx512_fp16', 'amx_fp16', 'fphp', 'asimdhp')}
_WRAPPERS = ('OptimWrapper', 'AmpOptimWrapper', 'CPUAutocastOptimWrapper')
# What mmengine's TestLoop(fp16=True) autocasts to (its runner.amp.autocast), by CUDA or not.
TEST_LOOP_PRECISION = {True: 'fp16', False: 'bf16'}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none, e.g. macOS)."""
    with contextlib.suppress(OSError), open('/proc/cpuinfo') as file:
        for line in file:
            key, _, value = line.partition(':')
            if key.strip() in ('flags', 'Features'):
                return frozenset(value.split())
    return frozenset()


@functools.cache
def autocast_runs(device_type: str, precision: str) -> bool:
    """Whether torch autocasts a matmul to that dtype here (a torch without CPU float16 autocast
    warns and runs float32 instead; on a GPU without bfloat16 ``torch.autocast`` raises)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            with torch.autocast(device_type, dtype=DTYPES[precision]):
                out = torch.ones(2, 2, device=device_type) @ torch.ones(2, 2, device=device_type)
        return out.dtype == DTYPES[precision]
    except RuntimeError:
        return False


def config_precision(cfg: Config) -> str:
    """'fp16', 'bf16' or 'fp32': what the config's ``optim_wrapper`` trains in."""
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') not in ('AmpOptimWrapper', 'CPUAutocastOptimWrapper'):
        return 'fp32'
    dtype = str(wrapper.get('dtype') or ('bfloat16' if wrapper['type'] ==
                                        'CPUAutocastOptimWrapper' else 'float16'))
    return 'bf16' if 'bfloat16' in dtype else 'fp16'


def choose_precision(requested: str, configured: str, cuda: bool, flags=frozenset(),
                     runs=lambda precision: True) -> tuple[str, str]:
    """The precision to run and why, in words, for ``requested`` (one of :data:`PRECISIONS`) and
    the config's own (:func:`config_precision`) on CUDA or a CPU with ``flags``
    (:func:`cpu_flags`); ``runs(p)``: whether autocast to ``p`` works here. A precision that
    cannot run is a :class:`UserError`."""
    if requested not in PRECISIONS:
        raise UserError(f'--precision {requested}: choose one of {", ".join(PRECISIONS)}')
    device = 'CUDA' if cuda else 'CPU'
    native = {p for p, names in NATIVE_CPU_FLAGS.items() if flags & set(names)}
    if requested == 'auto':
        if cuda or configured == 'fp32':
            return configured, f'auto: the config\'s {configured} on {device}'
        why = ('a B3 step in bfloat16 measured no faster than fp32 even where native' if
               'bf16' in native else 'this CPU has no native bfloat16 (no avx512_bf16/amx_bf16 '
               'flag) and emulates it 10-65x slower than fp32')
        return 'fp32', (f'auto: the config\'s {configured} as fp32 on a CPU: {why}; '
                        '--precision bf16 or fp16 forces it')
    if requested != 'fp32' and not runs(requested):
        available = [p for p in ('fp16', 'bf16') if p != requested and runs(p)] + ['fp32']
        raise UserError(f'--precision {requested}: {DTYPES[requested]} autocast does not run on '
                        f'this {device} (torch {torch.__version__}); available here: '
                        f'{", ".join(available)}')
    if requested != 'fp32' and not cuda and requested not in native:
        return requested, (f'--precision {requested}: emulated on this CPU (no '
                           f'{"/".join(NATIVE_CPU_FLAGS[requested][:2])} flag), expect it many '
                           'times slower than fp32')
    return requested, f'--precision {requested} on {device}'


def _choose_here(requested: str, configured: str, cuda: bool) -> tuple[str, str]:
    """:func:`choose_precision` with this CPU's flags and this torch's autocast."""
    return choose_precision(requested, configured, cuda, cpu_flags(),
                            functools.partial(autocast_runs, 'cuda' if cuda else 'cpu'))


def apply_precision(cfg: Config, requested: str = 'auto', cuda: bool | None = None) -> str:
    """Rewrite ``cfg.optim_wrapper`` to run in the chosen precision; log the choice in one line.

    Returns the precision chosen ('fp16', 'bf16' or 'fp32').
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    wrapper = cfg.get('optim_wrapper')
    if wrapper is None:
        return 'fp32'
    configured = config_precision(cfg)
    if requested != 'auto' and wrapper.get('type') not in _WRAPPERS:
        raise UserError(f'--precision {requested} needs optim_wrapper.type in {_WRAPPERS}; the '
                        f'config has {wrapper.get("type")!r}')
    chosen, reason = _choose_here(requested, configured, cuda)
    wrapper_type = wrapper.get('type')
    # AmpOptimWrapper refuses to run without a GPU: replaced even at its own dtype (and back).
    if chosen != configured or wrapper_type == ('CPUAutocastOptimWrapper' if cuda else
                                                'AmpOptimWrapper'):
        wrapper_type = ('OptimWrapper' if chosen == 'fp32' else
                        'AmpOptimWrapper' if cuda else 'CPUAutocastOptimWrapper')
        for key in ('dtype', 'use_fsdp') + (('loss_scale',) if chosen != 'fp16' else ()):
            wrapper.pop(key, None)
        wrapper['type'] = wrapper_type
        if chosen != 'fp32':
            wrapper['dtype'] = 'float16' if chosen == 'fp16' else 'bfloat16'
        if chosen == 'fp16':
            wrapper.setdefault('loss_scale', 'dynamic')
    level = logging.INFO if chosen == configured and 'emulated' not in reason else logging.WARNING
    print_log(f'[afno_seg] precision {chosen} ({reason}): optim_wrapper {wrapper_type}',
              logger='current', level=level)
    return chosen


# Under compile=True mmengine compiles the whole train_step; traced, the optimizer step fails in
# torch 2.14 on mmengine's ConfigDict param groups, and a learning rate changing every iteration
# would recompile. These wrappers and CPUAutocastOptimWrapper keep update_params eager;
# AfnoSegRunner builds them under compile in place of the config's type (EAGER_STEP).
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
    """``AmpOptimWrapper`` on a CPU: ``torch.autocast('cpu', dtype)``, loss scaling through
    ``torch.amp.GradScaler('cpu')``. mmengine's asserts a GPU in its ``__init__``, which this
    one replaces (setting the ``_scale_update_param`` its ``step`` reads: docs/private_apis.md);
    all the rest of it is kept (scaled ``backward``, unscale for clipping, the scaler's step and
    update, its state in ``state_dict``); ``update_params`` stays eager under ``compile``.
    ``bfloat16`` needs no loss scale (float32's exponent range).

    Args:
        dtype (str): ``'float16'`` (loss-scaled) or ``'bfloat16'``. Default: 'bfloat16'.
        loss_scale (str | float | dict): As ``AmpOptimWrapper``'s; float16 only.
            Default: 'dynamic'.
        **kwargs: Passed to :class:`mmengine.optim.OptimWrapper`.
    """

    def __init__(self, dtype: str = 'bfloat16', loss_scale='dynamic', **kwargs) -> None:
        OptimWrapper.__init__(self, **kwargs)  # not AmpOptimWrapper's: it asserts a GPU
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if self.cast_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f'CPUAutocastOptimWrapper: dtype float16 or bfloat16, not {dtype}')
        self._scale_update_param = None
        if isinstance(loss_scale, float):
            self._scale_update_param = loss_scale
            scaler_args = dict(init_scale=loss_scale)
        elif isinstance(loss_scale, dict):
            scaler_args = dict(loss_scale)
        elif loss_scale == 'dynamic':
            scaler_args = {}
        else:
            raise TypeError(f'loss_scale: \'dynamic\', a float or a dict, not {loss_scale!r}')
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
    """Set ``cfg.test_cfg.fp16`` to evaluate in the chosen precision (``auto``: the config's on
    CUDA, fp32 on a CPU); log it in one line. mmengine's ``TestLoop(fp16=True)`` autocasts to
    float16 on CUDA and to bfloat16 on a CPU: the other two are a :class:`UserError`."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    test_cfg = cfg.get('test_cfg') or {}
    configured = 'fp16' if test_cfg.get('fp16') else 'fp32'
    if requested == 'auto' and configured == 'fp32':
        return 'fp32'
    chosen, reason = _choose_here(requested, configured, cuda)
    if chosen not in ('fp32', TEST_LOOP_PRECISION[cuda]):
        raise UserError(f'--precision {chosen}: tools/test.py evaluates through mmengine\'s '
                        f'TestLoop, which autocasts to {TEST_LOOP_PRECISION[cuda]} on '
                        f'{"CUDA" if cuda else "a CPU"}; choose that or fp32')
    test_cfg['fp16'] = chosen != 'fp32'
    cfg.test_cfg = test_cfg
    print_log(f'[afno_seg] test precision {chosen} ({reason})', logger='current',
              level=logging.INFO if chosen == configured else logging.WARNING)
    return chosen
