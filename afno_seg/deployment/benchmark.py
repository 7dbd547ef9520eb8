"""onnxruntime against PyTorch: logit parity and CPU time on the real Cityscapes frame.

For each model: build it from its config (random initialisation, ``init_weights``), prepare the
frame with the config's own test pipeline, export :class:`~.onnx_export.SegmentorLogits` at the
prepared size, then compare onnxruntime's logits with PyTorch's (max abs difference, argmax
agreement) and time both side by side in one process: the two backends alternate, each timed
``repeats`` times after a warm-up, on the same number of threads; the ratio of the medians is
reported (absolute times on a shared machine are noise).
"""
import os
import os.path as osp
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from mmengine.config import Config

from ..mixers import mixer_variants
from .onnx_export import INPUT_NAME, OPSET, SegmentorLogits, export_onnx, onnx_session
from .predictor import array_pipeline

__all__ = ['MixerAlone', 'ParityResult', 'compare_backends', 'demo_model_configs',
           'prepared_input']


def demo_model_configs(demo_config: str, variants: list[str] | None = None) -> dict[str, Config]:
    """The demo config with its mixer swapped for each variant (``variants``: short names)."""
    table = mixer_variants()
    configs = {}
    for name in variants or sorted(table):
        cfg = Config.fromfile(demo_config)
        mixer = dict(table[name])
        if mixer.get('type') == 'AFNOMixer':
            mixer['num_blocks'] = 4  # the demo's: 32-channel stage 1
        cfg.model.backbone.mixers = mixer
        configs[name] = cfg
    return configs


def prepared_input(cfg: Config, image: np.ndarray, model) -> torch.Tensor:
    """The normalised ``(1, 3, H, W)`` tensor the config's pipeline and preprocessor make of a
    BGR image (what ``encode_decode`` and the exported graph take)."""
    from mmcv.transforms import Compose
    item = Compose(array_pipeline(cfg))(dict(img=image))
    data = model.data_preprocessor(dict(inputs=[item['inputs']],
                                        data_samples=[item['data_samples']]), False)
    return data['inputs']


@dataclass
class ParityResult:
    """One model's comparison (times are medians in ms; ``ratio`` = onnxruntime / PyTorch)."""
    model: str
    input_hw: str
    max_abs_diff: float
    max_abs_logit: float
    argmax_agreement: float
    torch_ms: float
    ort_ms: float
    ratio: float
    export_s: float

    def row(self) -> dict:
        return asdict(self)


def _time(run, repeats: int) -> list[float]:
    return [_timed(run) for _ in range(repeats)]


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return 1e3 * (time.perf_counter() - start)


class MixerAlone(torch.nn.Module):
    """``tokens (1, H*W, C) -> mixer(tokens, (H, W))``, for timing one mixer by itself."""

    def __init__(self, mixer, hw_shape: tuple[int, int]) -> None:
        super().__init__()
        self.mixer, self.hw_shape = mixer, tuple(hw_shape)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.mixer(tokens, self.hw_shape)


def _export_module(network, inputs: torch.Tensor, path: str) -> None:
    with torch.no_grad():
        program = torch.onnx.export(network.eval(), (inputs, ), dynamo=True, opset_version=OPSET,
                                    input_names=[INPUT_NAME], external_data=False,
                                    verbose=False)
    program.save(path)


def compare_backends(name: str, model, inputs: torch.Tensor, repeats: int = 5,
                     threads: int = 1, work_dir: str | None = None) -> ParityResult:
    """Export ``model`` at the size of ``inputs``, then compare and time both backends.

    Args:
        name (str): Row label.
        model (nn.Module): A segmentor (its ``encode_decode`` is exported, as by
            :func:`.export_onnx`), or any module (e.g. :class:`MixerAlone`) taking ``inputs``.
        inputs (Tensor): ``(1, 3, H, W)`` from :func:`prepared_input`, or the module's input.
        repeats (int): Timed runs per backend, alternating. Default: 5.
        threads (int): torch and onnxruntime intra-op threads. Default: 1.
        work_dir (str, optional): Where the .onnx goes (a temporary folder if None).
            Default: None.
    """
    torch.set_num_threads(threads)
    segmentor = hasattr(model, 'encode_decode')
    with tempfile.TemporaryDirectory(dir=work_dir) as folder:
        path = osp.join(folder, f'{name}.onnx')
        start = time.perf_counter()
        if segmentor:
            export_onnx(model, tuple(inputs.shape[2:]), path)
        else:
            _export_module(model, inputs, path)
        export_seconds = time.perf_counter() - start
        session = onnx_session(path, threads=threads)
        network = SegmentorLogits(model.eval()) if segmentor else model.eval()
        feed = {INPUT_NAME: inputs.numpy()}
        with torch.no_grad():
            expected = network(inputs).numpy()
            (actual, ) = session.run(None, feed)
            torch_ms, ort_ms = [], []
            for _ in range(repeats + 1):  # the first pair warms up
                torch_ms.append(_timed(lambda: network(inputs)))
                ort_ms.append(_timed(lambda: session.run(None, feed)))
    torch_median, ort_median = statistics.median(torch_ms[1:]), statistics.median(ort_ms[1:])
    agreement = float((actual.argmax(1) == expected.argmax(1)).mean()) if segmentor else float(
        'nan')
    size = 'x'.join(str(s) for s in (inputs.shape[2:] if segmentor else model.hw_shape))
    return ParityResult(name, size, float(np.abs(actual - expected).max()),
                        float(np.abs(expected).max()), agreement, round(torch_median, 2),
                        round(ort_median, 2), round(ort_median / torch_median, 3),
                        round(export_seconds, 1))


def markdown_table(results: list[ParityResult]) -> str:
    """The results as a Markdown table."""
    lines = ['| model | input | max abs diff | max abs logit | argmax agree | PyTorch ms | '
             'ORT ms | ORT / PyTorch |', '|---|---|---|---|---|---|---|---|']
    for r in results:
        lines.append(f'| {r.model} | {r.input_hw} | {r.max_abs_diff:.2e} | {r.max_abs_logit:.3g} '
                     f'| {_percent(r.argmax_agreement)} | {r.torch_ms:.1f} | {r.ort_ms:.1f} | '
                     f'{r.ratio:.2f} |')
    return '\n'.join(lines) + '\n'


def _percent(fraction: float) -> str:
    return '-' if fraction != fraction else f'{100 * fraction:.3f}%'  # NaN: no argmax


def ensure_dir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path
