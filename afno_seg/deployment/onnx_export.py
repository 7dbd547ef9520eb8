"""ONNX export of a whole segmentor, in mmseg's deployment convention, and its self-check.

The graph is ``EncoderDecoder.encode_decode``: the normalised image ``(1, 3, H, W)`` in, the
logits ``(1, num_classes, H, W)`` out; resizing and argmax stay outside, as with mmdeploy.
Standard ONNX ops only (torch's dynamo exporter, opset 20), the mixers in their export forms; the
spectral transforms as the ONNX ``DFT`` op or as matmuls with constant DFT matrices
(:mod:`afno_seg.mixers.export.dft`), chosen by :func:`resolve_dft` (measurements in
``BENCHMARKS.md``, "DFT as matmuls"). OpenVINO needs the matmul form.
"""
import os
import os.path as osp

import numpy as np
import torch
from torch import Tensor, nn

from ..engine.errors import UserError
from ..mixers.base import TokenMixer
from ..mixers.forms import use_form

__all__ = ['DFT_CHOICES', 'SegmentorLogits', 'export_onnx', 'onnx_max_abs_difference',
           'onnx_session', 'resolve_dft', 'static_shape_mixers']

OPSET = 20  # DFT-20 takes the axis and length as inputs; onnxruntime >= 1.17 runs it
INPUT_NAME, OUTPUT_NAME = 'inputs', 'seg_logits'
DFT_CHOICES = ('auto', 'op', 'matmul')


class SegmentorLogits(nn.Module):
    """``inputs (B, 3, H, W) -> logits (B, num_classes, H, W)``: the ``encode_decode`` of an
    mmseg ``EncoderDecoder``, as a module to export."""

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        self.segmentor = segmentor

    def forward(self, inputs: Tensor) -> Tensor:
        # img_shape as a torch.Size: the decode head resizes its logits to the input's size.
        metas = [dict(img_shape=inputs.shape[2:], ori_shape=inputs.shape[2:])] * inputs.shape[0]
        return self.segmentor.encode_decode(inputs, metas)


def static_shape_mixers(model: nn.Module) -> list[str]:
    """Names of the mixer classes in ``model`` that cannot be exported with dynamic H, W (their
    ``onnx_dynamic_shape`` is False)."""
    return sorted({type(module).__name__ for module in model.modules()
                   if isinstance(module, TokenMixer)
                   and not getattr(module, 'onnx_dynamic_shape', True)})


def resolve_dft(dft: str, dynamic: bool) -> tuple[str, str]:
    """The form (``'op'`` or ``'matmul'``) an export with ``dft`` and ``dynamic`` takes, and a
    one-line note when it differs from what was asked ('' otherwise).

    ``'auto'``: matmul for a fixed size, op with dynamic H, W; ``'matmul'`` with ``dynamic``
    falls back to the op form (the DFT matrices are constants built for the export's sizes).
    """
    if dft not in DFT_CHOICES:
        raise UserError(f'--dft must be one of {", ".join(DFT_CHOICES)}, got {dft!r}')
    if dynamic and dft == 'matmul':
        return 'op', ('--dynamic: the matmul DFT needs fixed H, W (its matrices are constants); '
                      'the spectral transforms are exported as DFT ops instead')
    return (('op' if dynamic else 'matmul') if dft == 'auto' else dft), ''


def export_onnx(model: nn.Module, shape: tuple[int, int], out: str, dynamic: bool = False,
                opset: int = OPSET, dft: str = 'auto') -> str:
    """Export ``model.encode_decode`` at input size ``shape`` to the ``.onnx`` file ``out``;
    returns ``out``.

    Args:
        model (nn.Module): mmseg ``EncoderDecoder`` (moved to CPU, eval mode, for the export).
        shape (tuple[int, int]): Input ``(H, W)`` of the exported graph (the example input).
        out (str): The file to write (folders created).
        dynamic (bool): Dynamic H and W. Default: False.
        opset (int): ONNX opset (>= 17). Default: 20.
        dft (str): The spectral transforms as ``'op'`` (ONNX DFT), ``'matmul'`` or ``'auto'``
            (:func:`resolve_dft`). Default: 'auto'.
    """
    form, _ = resolve_dft(dft, dynamic)
    static = static_shape_mixers(model) if dynamic else []
    if static:
        raise UserError(f'--dynamic: {", ".join(static)} cannot be exported with dynamic H, W '
                        '(see onnx_dynamic_shape in its class); export at a fixed --shape')
    example = torch.zeros(1, 3, *(int(size) for size in shape))
    return export_network(SegmentorLogits(model.cpu().eval()), example, out, dynamic=dynamic,
                          opset=opset, form=form)


def export_network(network: nn.Module, example: Tensor, out: str, dynamic: bool = False,
                   opset: int = OPSET, form: str = 'op', min_size: int = 32) -> str:
    """Export ``network(example)`` (one input ``(N, C, H, W)``, one output) to ``out``, its
    spectral transforms in ``form`` (``'op'`` or ``'matmul'``); with ``dynamic``, H and W of the
    input are symbolic (from ``min_size`` to 8192)."""
    dims = {2: torch.export.Dim('height', min=min_size, max=8192),
            3: torch.export.Dim('width', min=min_size, max=8192)}
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    with torch.no_grad(), use_form(form):
        program = torch.onnx.export(
            network.eval(), (example, ), dynamo=True, opset_version=opset,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_shapes=(dims, ) if dynamic else None, external_data=False, verbose=False)
    program.save(out)
    if dynamic:
        _drop_intermediate_shapes(out)
    return out


def _drop_intermediate_shapes(path: str) -> None:
    """Remove the exporter's shape annotations of intermediate values (onnxruntime infers its
    own when it loads the file).

    With dynamic H, W, torch 2.14's exporter annotates the output of ``irfft2``'s inverse DFT with
    the symbolic size of its input's half axis (``W // 2 + 1``) instead of ``W``; onnxruntime then
    re-uses a buffer of the wrong size and fails ("Shape mismatch attempting to re-use buffer").
    """
    import onnx
    model = onnx.load(path)
    del model.graph.value_info[:]
    for function in model.functions:
        del function.value_info[:]
    onnx.save(model, path)


def onnx_session(path: str, threads: int | None = None, device: str = 'cpu',
                 profile_prefix: str | None = None):
    """An onnxruntime ``InferenceSession`` of ``path`` (CUDA provider first for ``cuda``);
    ``profile_prefix``: onnxruntime's profiler on, its JSON file named from this prefix."""
    import onnxruntime
    if not osp.isfile(path):
        raise UserError(f'ONNX file not found: {path}')
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    providers = (['CUDAExecutionProvider'] if device.startswith('cuda') else []) + [
        'CPUExecutionProvider']
    try:
        return onnxruntime.InferenceSession(path, options, providers=providers)
    except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise UserError(f'{path}: onnxruntime cannot load it ({type(error).__name__}: '
                        f'{str(error).splitlines()[0]})') from error


def onnx_max_abs_difference(model: nn.Module, session, inputs: Tensor) -> float:
    """Max abs difference between onnxruntime's and PyTorch's logits for ``inputs``."""
    with torch.no_grad():
        expected = SegmentorLogits(model.cpu().eval())(inputs).numpy()
    (actual, ) = session.run(None, {INPUT_NAME: inputs.numpy()})
    return float(np.abs(actual - expected).max())
