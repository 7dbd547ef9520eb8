"""FLOP handles that let mmengine's ``FlopAnalyzer`` count FFTs, complex products and attention.

mmengine counts each ``aten::`` op of a ``torch.jit`` trace through a handle, and ops without one
as zero: it has none for the FFTs, ``baddbmm`` (AFNO's block-diagonal MLP), complex element-wise
products (GFN's filter), ``avg_pool2d`` (PoolFormer's pooling: ``k^2`` FLOPs an output) or
``scaled_dot_product_attention``, and its ``matmul``/``bmm`` count a
complex multiply-add like a real one. The handles below fill those gaps through the public
``FlopAnalyzer.set_op_handle``; mmengine's own (convolutions, norm and resize estimates) stay.

Units: mmengine counts multiply-accumulates and our mixers real FLOPs (1 MAC = 2 FLOPs), so every
handle returns **MAC-equivalents = FLOPs / 2**: ``GFLOPs = 2 x GMACs`` for every op and module. An
FFT costs :func:`afno_seg.mixers.spectral.fft_flops` (the mixers' own formula), a complex
multiply-add 4 real ones, a complex element-wise product 6 FLOPs (complex x real: 2), attention
``B h L S (E + Ev)`` MACs. ``docs/flops.md`` states the convention and its sources.
"""
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from mmengine.analysis import FlopAnalyzer, jit_handles
from mmengine.analysis.jit_handles import get_shape
from torch import Tensor, nn

from ..mixers.base import MixerAlone
from ..mixers.spectral import fft_flops
from .tracing import tracing_for_flops

__all__ = ['FLOPS_PER_MAC', 'FLOP_HANDLES', 'NORM_OPS', 'build_flop_analyzer', 'count_mixer_flops',
           'is_fft_op']

FLOPS_PER_MAC = 2
# Ops that mmengine counts with its own per-element norm estimates.
NORM_OPS = ('layer_norm', 'group_norm', 'batch_norm', 'instance_norm')
_UNKNOWN = object()


def _prod(values) -> int:
    return math.prod(int(v) for v in values)


def _constant(value: Any) -> Any:
    """The Python value of a traced argument: constants, lists of them, ``_UNKNOWN`` if traced."""
    node = value.node()
    if node.kind() == 'prim::ListConstruct':
        return [_constant(v) for v in node.inputs()]
    if node.kind() == 'prim::Constant':
        return value.toIValue()
    return _UNKNOWN


def _is_complex(value: Any) -> bool:
    """Whether a traced value is a complex tensor (or a list holding one)."""
    value_type = value.type()
    if isinstance(value_type, torch._C.TensorType):
        return (value_type.scalarType() or '').startswith('Complex')
    if value.node().kind() == 'prim::ListConstruct':
        return any(_is_complex(v) for v in value.node().inputs())
    return False


def is_fft_op(name: str) -> bool:
    """Whether an operator name (``aten::`` prefix or not) is an FFT."""
    name = name.split('::')[-1]
    return name.startswith(('fft_', '_fft_'))


# ---------------------------------------------------------------- FFTs
# aten op -> (family, default dims). Families: 'full' (complex output of the full length; the
# input may be real), 'onesided' (real input, half-spectrum output), 'real_out' (real output).
_FFT_OPS = {f'fft_{name}{suffix}': (family, dims)
            for family, names in (('full', ('fft', 'ifft')), ('onesided', ('rfft', 'ihfft')),
                                  ('real_out', ('irfft', 'hfft')))
            for name in names for suffix, dims in (('', [-1]), ('2', [-2, -1]), ('n', None))}


def _fft_dims(name: str, inputs: list, ndim: int) -> tuple[list[int], list | None]:
    """Transformed dims (non-negative) and the signal-size argument ``s``/``n`` of a public FFT."""
    default_dims = _FFT_OPS[name][1]
    size_arg = _constant(inputs[1])
    dims = _constant(inputs[2])
    one_dimensional = default_dims is not None and len(default_dims) == 1
    if one_dimensional:
        dims = [dims if isinstance(dims, int) else -1]
        size_arg = None if size_arg is None else [size_arg]
    elif dims is None or dims is _UNKNOWN:
        if default_dims is not None:
            dims = default_dims
        else:  # fftn family: the last len(s) dims, or all of them
            dims = list(range(-len(size_arg), 0)) if isinstance(size_arg, list) else \
                list(range(ndim))
    return [d % ndim for d in dims], size_arg


def fft_flop_jit(inputs: list, outputs: list) -> Counter:
    """Handle for the public ``aten::fft_*`` ops and the primitives ``_fft_r2c/_fft_c2r/_fft_c2c``.

    Returns MAC-equivalents (FLOPs / 2) under the op's own name.
    """
    node = outputs[0].node()
    name = node.kind().split('::')[-1]
    in_shape, out_shape = get_shape(inputs[0]), get_shape(outputs[0])
    if name.startswith('_fft_'):
        dims = [d % len(out_shape) for d in _constant(inputs[1])]
        side = out_shape if name == '_fft_c2r' else in_shape  # the full-length side
        lengths = [side[d] for d in dims]
        real = name in ('_fft_r2c', '_fft_c2r')
    else:
        family = _FFT_OPS[name][0]
        dims, size_arg = _fft_dims(name, inputs, len(out_shape))
        lengths = [out_shape[d] for d in dims]
        if family == 'onesided':  # the last length is the real signal's, not the half spectrum's
            last = size_arg[-1] if isinstance(size_arg, list) else _UNKNOWN
            lengths[-1] = last if isinstance(last, int) and last > 0 else in_shape[dims[-1]]
        real = family in ('onesided', 'real_out') or not _is_complex(inputs[0])
    batch = _prod(out_shape) // max(1, _prod(out_shape[d] for d in dims))
    return Counter({name: batch * fft_flops(_prod(lengths), real=real) / FLOPS_PER_MAC})


# ---------------------------------------------------------------- products
def _matmul_macs(left: list[int], right: list[int]) -> int:
    """Multiply-adds of ``torch.matmul`` of the two shapes, broadcast batch dims included."""
    left = [1] + list(left) if len(left) == 1 else list(left)
    right = list(right) + [1] if len(right) == 1 else list(right)
    assert left[-1] == right[-2], (left, right)
    batch = torch.broadcast_shapes(tuple(left[:-2]), tuple(right[:-2]))
    return _prod(batch) * left[-2] * left[-1] * right[-1]


def matmul_flop_jit(inputs: list, outputs: list) -> int:
    """``aten::matmul``/``mm``/``bmm``. Unlike mmengine's matmul handle, this one counts a
    broadcast batch on either side (a matrix applied to a batch of inputs)."""
    return _matmul_macs(get_shape(inputs[0]), get_shape(inputs[1]))


def baddbmm_flop_jit(inputs: list, outputs: list) -> int:
    """``aten::baddbmm(bias, batch1, batch2, beta, alpha)``: the batched product (bias add free)."""
    return _matmul_macs(get_shape(inputs[1]), get_shape(inputs[2]))


def _complex_aware(handle: Callable) -> Callable:
    """Wrap a real product handle (a count of multiply-adds): a complex one is 4 real ones."""

    def complex_aware_handle(inputs: list, outputs: list) -> int | float:
        count = handle(inputs, outputs)
        return 4 * count if any(_is_complex(v) for v in inputs) else count

    return complex_aware_handle


def complex_mul_flop_jit(inputs: list, outputs: list) -> Counter:
    """``aten::mul`` of two tensors with a complex result: 6 FLOPs (complex x complex) or 2
    (complex x real) per element. Real products and scalar scalings are not counted."""
    shapes = [get_shape(v) if isinstance(v.type(), torch._C.TensorType) else None
              for v in inputs[:2]]
    if not _is_complex(outputs[0]) or any(not shape for shape in shapes):
        return Counter()
    flops_each = 6 if all(_is_complex(v) for v in inputs[:2]) else 2
    return Counter({'complex_mul': flops_each * _prod(get_shape(outputs[0])) / FLOPS_PER_MAC})


def attention_flop_jit(inputs: list, outputs: list) -> Counter:
    """Scaled dot-product attention ``(q, k, v, ...)``: ``Q K^T`` plus ``A V`` multiply-adds."""
    query, key, value = (get_shape(v) for v in inputs[:3])
    batch, length, dim = _prod(query[:-2]), query[-2], query[-1]
    return Counter({'scaled_dot_product_attention': batch * length * key[-2] * (dim + value[-1])})


def avg_pool_flop_jit(inputs: list, outputs: list) -> float:
    """``aten::avg_pool2d(x, kernel_size, ...)``: an average of ``kh kw`` values costs ``kh kw``
    FLOPs per output (``kh kw - 1`` additions, one division), the window counted whole at the
    border as a convolution's taps are (PoolFormer's pooling)."""
    kernel = _constant(inputs[1])
    taps = _prod(kernel) if len(kernel) == 2 else kernel[0] ** 2
    return taps * _prod(get_shape(outputs[0])) / FLOPS_PER_MAC


#: Handles installed on top of mmengine's defaults (all return MAC-equivalents). None: ops that
#: re-label complex data (no arithmetic), ignored rather than listed as unsupported.
FLOP_HANDLES: dict[str, Callable | None] = {
    **{f'aten::{name}': fft_flop_jit for name in [*_FFT_OPS, '_fft_r2c', '_fft_c2r', '_fft_c2c']},
    **dict.fromkeys(('aten::scaled_dot_product_attention',
                     'aten::_scaled_dot_product_flash_attention_for_cpu',
                     'aten::_scaled_dot_product_flash_attention',
                     'aten::_scaled_dot_product_efficient_attention',
                     'aten::_scaled_dot_product_cudnn_attention',
                     'prim::PythonOp._ShapeOnlyAttention'), attention_flop_jit),
    **dict.fromkeys(('aten::matmul', 'aten::mm', 'aten::bmm'), _complex_aware(matmul_flop_jit)),
    'aten::baddbmm': _complex_aware(baddbmm_flop_jit),
    'aten::linear': _complex_aware(jit_handles.linear_flop_jit),
    'aten::addmm': _complex_aware(jit_handles.addmm_flop_jit),
    'aten::einsum': _complex_aware(jit_handles.einsum_flop_jit),
    'aten::mul': complex_mul_flop_jit,
    'aten::mul_': complex_mul_flop_jit,
    'aten::avg_pool2d': avg_pool_flop_jit,
    **dict.fromkeys(('aten::view_as_real', 'aten::view_as_complex', 'aten::complex', 'aten::real',
                     'aten::imag')),
}


def build_flop_analyzer(model: nn.Module, inputs: Tensor | tuple) -> FlopAnalyzer:
    """mmengine's ``FlopAnalyzer`` with :data:`FLOP_HANDLES` installed and its warnings off.

    Counts are MAC-equivalents (see the module docstring); multiply by :data:`FLOPS_PER_MAC`
    for FLOPs. The trace runs lazily, on the first query.
    """
    analyzer = FlopAnalyzer(model, inputs).set_op_handle(**FLOP_HANDLES)
    return analyzer.unsupported_ops_warnings(False).uncalled_modules_warnings(False)


def count_mixer_flops(mixer: nn.Module, hw_shape: tuple[int, int], batch_size: int = 1,
                      attention_stand_in: bool = False) -> Counter:
    """Traced real FLOPs of one mixer call on ``batch_size`` random ``(H*W, C)`` token maps.

    Returns:
        Counter: FLOPs by operator name, norms (mmengine's estimates) included under their names.
    """
    tokens = torch.randn(batch_size, math.prod(hw_shape), mixer.embed_dims,
                         device=next(iter(mixer.parameters()), torch.empty(0)).device)
    analyzer = build_flop_analyzer(MixerAlone(mixer, hw_shape).eval(), (tokens, ))
    with tracing_for_flops(attention_stand_in):
        counts = analyzer.by_operator()
    return Counter({op: FLOPS_PER_MAC * value for op, value in counts.items()})
