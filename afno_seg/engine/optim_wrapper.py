"""``AmpOptimWrapper`` on a CPU: autocast with mmengine's loss scaling, through torch's CPU scaler.

mmengine's ``AmpOptimWrapper`` asserts a GPU/NPU/MLU/MUSA in its ``__init__``. torch has CPU
float16 autocast and ``torch.amp.GradScaler('cpu')``, so this subclass keeps all of it (loss
scaling in ``backward``, unscale for clipping, the scaler's step and update, its state in
``state_dict``) and changes only what names the device: the scaler and the autocast context.
With ``dtype='float16'`` an inf/NaN gradient skips the step and halves the scale, as on the GPU;
``bfloat16`` needs no loss scale (float32's exponent range). :func:`~.precision.apply_precision`
picks it (``--precision``).
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
