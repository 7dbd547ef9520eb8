"""From a trained checkpoint to predictions: inference on files and videos (resumable, sharded)
in PyTorch, onnxruntime or OpenVINO with the config's own pre- and post-processing, ONNX export;
an HTML evaluation report (:mod:`.report`, imported on use: it registers ``SegReportMetric``)."""
from .files import collect_inputs, read_image
from .model import load_segmentor, set_inference_mode
from .onnx_export import (
    SegmentorLogits,
    export_network,
    export_onnx,
    onnx_max_abs_difference,
    onnx_session,
    static_shape_mixers,
)
from .predictor import Segmenter, openvino_session, use_onnxruntime
from .segment_files import segment_files

__all__ = [
    'Segmenter', 'SegmentorLogits', 'collect_inputs', 'export_network', 'export_onnx',
    'load_segmentor', 'onnx_max_abs_difference', 'onnx_session', 'openvino_session', 'read_image',
    'segment_files', 'set_inference_mode', 'static_shape_mixers', 'use_onnxruntime'
]
