"""CPU stand-in for ``AmpOptimWrapper``: bfloat16 autocast, no loss scaling.

mmengine's ``AmpOptimWrapper`` refuses to run without a GPU/NPU/MLU. Configs written for GPU fp16
training are rewritten to this wrapper by :func:`afno_seg.engine.adapt_config_to_device` on a
machine without CUDA, so the same config trains on a laptop. bfloat16 has float32's exponent range,
so no loss scale is needed (and CPU autocast has no float16 matmul kernels worth using).
"""
from contextlib import contextmanager

import torch
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

__all__ = ['CPUAutocastOptimWrapper']


@OPTIM_WRAPPERS.register_module()
class CPUAutocastOptimWrapper(OptimWrapper):
    """OptimWrapper whose forward runs under ``torch.autocast('cpu', dtype)``.

    Args:
        dtype (str): Autocast dtype, ``'bfloat16'`` (the only one CPU autocast supports well).
            Default: 'bfloat16'.
        **kwargs: Passed to :class:`mmengine.optim.OptimWrapper`.
    """

    def __init__(self, dtype: str = 'bfloat16', **kwargs) -> None:
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype)

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with super().optim_context(model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield
