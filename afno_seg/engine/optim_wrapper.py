"""``AmpOptimWrapper`` on a CPU: autocast with mmengine's loss scaling, through torch's CPU scaler.

mmengine's ``AmpOptimWrapper`` refuses to run without a GPU/NPU/MLU/MUSA (an assertion in its
``__init__``). torch has had CPU float16 autocast and ``torch.amp.GradScaler('cpu')`` since 2.3,
so this subclass keeps everything of it (``backward`` scales the loss, ``step`` unscales for
clipping, steps through the scaler and updates the scale; ``state_dict`` carries the scaler) and
changes only the two places that name the device: the scaler and the autocast context.

- ``dtype='float16'``: a real dynamic loss scale, as on the GPU: an inf/NaN gradient skips the
  optimizer step and multiplies the scale by ``backoff_factor`` (0.5), ``growth_interval``
  (2000) finite steps in a row multiply it by ``growth_factor`` (2). ``loss_scale`` as in
  mmengine: ``'dynamic'``, a float (static), or a dict of ``GradScaler`` arguments.
- ``dtype='bfloat16'``: no loss scale (float32's exponent range; the scaler is disabled and
  not written into checkpoints).

:func:`afno_seg.engine.apply_precision` picks the wrapper and dtype (``--precision``).
"""
from contextlib import contextmanager

import torch
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

__all__ = ['CPUAutocastOptimWrapper']


@OPTIM_WRAPPERS.register_module()
class CPUAutocastOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` whose forward runs under ``torch.autocast('cpu', dtype)``.

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

    def state_dict(self) -> dict:
        state = super().state_dict()
        if not self.loss_scaler.is_enabled():  # {}: an fp16 resume could not load it
            state.pop('loss_scaler', None)
        return state

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with OptimWrapper.optim_context(self, model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield
