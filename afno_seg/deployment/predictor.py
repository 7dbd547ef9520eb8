"""Label maps for images: the config's test pipeline, then the segmentor in PyTorch, onnxruntime
or OpenVINO.

:class:`Segmenter` runs what mmseg's ``inference_model`` runs (``test_pipeline`` from an image
array, ``model.test_step``), batching equal-sized images; :func:`use_onnxruntime` swaps only the
network for a session of the exported graph, so every backend sees the same tensors.
"""
import copy
import os.path as osp
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from mmcv.transforms import Compose
from mmengine.dataset import pseudo_collate
from torch import Tensor

from ..engine.errors import UserError
from .onnx_export import INPUT_NAME

__all__ = ['OpenVinoSession', 'Prediction', 'Segmenter', 'array_pipeline', 'dft_nodes',
           'openvino_session', 'use_onnxruntime']


@dataclass
class Prediction:
    """One image's ``(H, W)`` uint8 train ids at its own size and its share of the batch's
    inference time (pipeline excluded)."""
    label: np.ndarray
    seconds: float


def array_pipeline(cfg) -> list[dict]:
    """The config's ``test_pipeline`` for image arrays: ``LoadImageFromFile`` ->
    ``LoadImageFromNDArray``, top-level ``LoadAnnotations`` dropped (mmseg's inference does the
    same; guarded label loading with ``requires='seg_map_path'`` passes images alone)."""
    if 'test_pipeline' not in cfg:
        raise UserError(f'{cfg.filename}: no test_pipeline to prepare images with')
    pipeline = [t for t in copy.deepcopy(cfg.test_pipeline) if t.get('type') != 'LoadAnnotations']
    loaders = [t for t in pipeline if t.get('type') == 'LoadImageFromFile']
    if not loaders:
        raise UserError(f'{cfg.filename}: test_pipeline has no top-level LoadImageFromFile '
                        "(mmseg's inference APIs need one to put their image loader in)")
    loaders[0]['type'] = 'LoadImageFromNDArray'
    return pipeline


class Segmenter:
    """Segment BGR ``uint8`` images with an ``EncoderDecoder`` in eval mode that has
    ``model.cfg`` (as mmseg's ``init_model`` builds it)."""

    def __init__(self, model) -> None:
        self.model = model
        self.pipeline = Compose(array_pipeline(model.cfg))

    def __call__(self, images: Sequence[np.ndarray]) -> list[Prediction]:
        """Segment ``images`` as batches of the ones whose pipeline output has one size."""
        return self.predict([self.prepare(image) for image in images])

    def prepare(self, image: np.ndarray) -> dict:
        """The test pipeline's output for one image; cheap to run in a DataLoader worker."""
        return self.pipeline(dict(img=image))

    def predict(self, prepared: Sequence[dict]) -> list[Prediction]:
        """Labels of :meth:`prepare` outputs; equal-sized ones go through in one forward pass."""
        results: list[Prediction | None] = [None] * len(prepared)
        groups: dict[tuple, list[int]] = {}
        for index, item in enumerate(prepared):
            groups.setdefault(tuple(item['inputs'].shape), []).append(index)
        for indices in groups.values():
            start = time.perf_counter()
            with torch.no_grad():
                outputs = self.model.test_step(pseudo_collate([prepared[i] for i in indices]))
            seconds = (time.perf_counter() - start) / len(indices)
            for index, output in zip(indices, outputs):
                label = output.pred_sem_seg.data[0].cpu().numpy().astype(np.uint8)
                results[index] = Prediction(label, seconds)
        return results


def use_onnxruntime(model, session, path: str):
    """Make the ``EncoderDecoder`` ``model`` compute its logits with ``session`` (an
    onnxruntime ``InferenceSession`` or :class:`OpenVinoSession` of a graph from
    :func:`.export_onnx`, read from ``path``); everything else stays PyTorch."""
    shape = session.get_inputs()[0].shape  # ints where static, names where dynamic
    static_hw = tuple(shape[2:]) if all(isinstance(s, int) for s in shape[2:]) else None

    def encode_decode(inputs: Tensor, batch_img_metas: list[dict]) -> Tensor:
        if static_hw is not None and tuple(inputs.shape[2:]) != static_hw:
            raise UserError(
                f'{path} takes {static_hw[0]}x{static_hw[1]} inputs (exported without '
                f'--dynamic) but the model gets {inputs.shape[2]}x{inputs.shape[3]} here; '
                'export at this --shape or with --dynamic, or use --mode slide with '
                'model.test_cfg.crop_size equal to the exported shape')
        array = inputs.detach().float().cpu().numpy()
        logits = [session.run(None, {INPUT_NAME: array[i:i + 1]})[0]
                  for i in range(array.shape[0])]
        return torch.from_numpy(np.concatenate(logits)).to(inputs.device)

    model.encode_decode = encode_decode
    return model


class OpenVinoSession:
    """An OpenVINO ``CompiledModel`` of a graph from :func:`.export_onnx` (one input) behind
    onnxruntime's ``run`` / ``get_inputs`` interface."""

    def __init__(self, compiled) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()

    def get_inputs(self) -> list[SimpleNamespace]:
        """``name`` and ``shape`` of the input, as onnxruntime's ``NodeArg`` has them."""
        port = self.compiled.input(0)
        shape = [dim.get_length() if dim.is_static else f'd{index}'
                 for index, dim in enumerate(port.get_partial_shape())]
        return [SimpleNamespace(name=port.get_any_name(), shape=shape)]

    def run(self, output_names, feed: dict) -> list[np.ndarray]:
        """All outputs for ``feed`` (``{input name: array}``; ``output_names`` is ignored)."""
        results = self.request.infer(list(feed.values()))
        # copies: the request's buffers are overwritten by the next call
        return [np.array(results[port]) for port in self.compiled.outputs]


def openvino_session(path: str, threads: int | None = None) -> OpenVinoSession:
    """The ONNX file ``path`` compiled by OpenVINO for the CPU, in float32.

    float32 explicitly: OpenVINO's CPU plugin would otherwise pick bfloat16 where the processor
    has it, which breaks parity with PyTorch. A graph with ``DFT`` nodes (``--dft op``) is
    refused: OpenVINO 2026.4's ONNX reader converts them wrongly without an error (FNet) or not
    at all (AFNO, GFN).
    """
    if not osp.isfile(path):
        raise UserError(f'ONNX file not found: {path}')
    if dft_nodes(path):
        raise UserError(f'{path} holds ONNX DFT nodes, which OpenVINO does not convert correctly; '
                        'export it with tools/deployment/pytorch2onnx.py --dft matmul')
    try:
        import openvino
    except ImportError as error:
        raise UserError('--backend openvino needs the openvino package (pinned in '
                        'requirements.txt): pip install openvino') from error
    config = {'INFERENCE_PRECISION_HINT': 'f32'}
    if threads:
        config['INFERENCE_NUM_THREADS'] = int(threads)
    try:
        core = openvino.Core()
        return OpenVinoSession(core.compile_model(core.read_model(path), 'CPU', config))
    except Exception as error:  # OpenVINO raises RuntimeError with a multi-line report
        text = str(error)
        failed = [line[3:].split(' with a message')[0] for line in text.splitlines()
                  if line.startswith('-- ')]
        detail = (f'conversion failed for {", ".join(failed)}' if failed else
                  [line for line in text.splitlines() if line.strip()][-1])
        raise UserError(f'{path}: OpenVINO cannot compile it ({detail})') from error


def dft_nodes(path: str) -> int:
    """Number of ONNX ``DFT`` nodes in the graph of ``path`` (its local functions included)."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    graphs = [model.graph.node] + [function.node for function in model.functions]
    return sum(node.op_type == 'DFT' for nodes in graphs for node in nodes)
