"""Tracing helpers for FLOP counting: context managers that patch torch for the duration of a
trace (custom autograd Functions run inline, attention as a shape-only stand-in) and restore it."""
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

from ..mixers.forms import use_form

__all__ = ['inline_autograd_functions', 'shape_only_attention', 'tracing_for_flops']


class _ShapeOnlyAttention(torch.autograd.Function):
    """Stand-in for attention while tracing: an output of the right shape, no arithmetic."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        return query.new_zeros(*query.shape[:-1], value.shape[-1])


def shape_only_attention() -> AbstractContextManager:
    """Replace ``F.scaled_dot_product_attention`` by a shape-only stand-in inside the block.

    Counting needs only shapes, and the real kernel on full self-attention's 65,536 stage-1 tokens
    at 1024 x 1024 takes minutes on a CPU. The stand-in is counted by the same handle, so the count
    is identical (``tests/test_flops.py`` checks it); only the output values are meaningless.
    """
    def stand_in(query, key, value, *args, **kwargs):
        return _ShapeOnlyAttention.apply(query, key, value)

    return mock.patch.object(F, 'scaled_dot_product_attention', stand_in)  # restored on exit


@contextmanager
def inline_autograd_functions() -> Iterator[None]:
    """Run custom ``torch.autograd.Function`` forwards as plain code inside the block.

    ``torch.jit`` records a custom Function as one opaque ``prim::PythonOp``, not the ops inside
    it, so an FFT wrapped in one (a fast path's hand-written backward) would count as zero; run
    inline, forward only, its ``aten::fft_*`` ops are traced and counted, whatever the Function is
    called. :class:`_ShapeOnlyAttention` stays opaque: it is meant to be one node.
    """
    original = torch.autograd.Function.__dict__['apply']
    default_setup_context = torch.autograd.Function.setup_context

    def apply(cls, *args, **kwargs):
        if cls is _ShapeOnlyAttention:
            return original.__get__(None, cls)(*args, **kwargs)
        if cls.setup_context is not default_setup_context:  # forward(*args), no ctx
            return cls.forward(*args, **kwargs)
        ctx = FunctionCtx()  # takes what forward saves and marks; backward never runs
        ctx.needs_input_grad = (False, ) * len(args)
        return cls.forward(ctx, *args, **kwargs)

    with mock.patch.object(torch.autograd.Function, 'apply', classmethod(apply)):
        yield


@contextmanager
def tracing_for_flops(attention_stand_in: bool = False) -> Iterator[None]:
    """The context every count here runs in: no autograd, custom Functions inline
    (:func:`inline_autograd_functions`), the mixers' formulas (their fast forms are custom ops
    the tracer cannot see into) and, optionally, :func:`shape_only_attention`."""
    with torch.no_grad(), inline_autograd_functions(), use_form('reference'), (
            shape_only_attention() if attention_stand_in else nullcontext()):
        yield
