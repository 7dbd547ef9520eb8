"""onnxruntime (DFT op and matmul forms) and OpenVINO against PyTorch: logit parity and CPU time.

Each model is exported at its input's size in both DFT forms; then PyTorch and the runtimes
alternate in each timed round, on the same number of threads, and the ratios of the medians are
reported (absolute times on a shared machine are noise).
"""
import contextlib
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
from .onnx_export import INPUT_NAME, SegmentorLogits, export_network, onnx_session
from .predictor import array_pipeline, openvino_session

__all__ = ['RUNTIMES', 'MixerAlone', 'ParityResult', 'compare_backends', 'demo_model_configs',
           'markdown_table', 'prepared_input', 'timed_ms']


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
    from mmengine.dataset import pseudo_collate
    item = Compose(array_pipeline(cfg))(dict(img=image))
    return model.data_preprocessor(pseudo_collate([item]), False)['inputs']


FORMS = {'ort-op': 'op', 'ort-matmul': 'matmul', 'openvino': 'matmul'}  # runtime: graph it runs
RUNTIMES = tuple(FORMS)


@dataclass
class ParityResult:
    """One model's comparison: per runtime (``RUNTIMES``) its median time in ms, its ratio to
    PyTorch's (``ratio``), the max abs logit difference and the argmax agreement (NaN for a
    module without classes); ``export_s``: seconds of all exports."""
    model: str
    input_hw: str
    max_abs_logit: float
    torch_ms: float
    export_s: float
    runtimes: dict[str, dict[str, float]]

    def row(self) -> dict:
        row = {k: v for k, v in asdict(self).items() if k != 'runtimes'}
        for runtime in RUNTIMES:
            for key in ('ms', 'ratio', 'max_abs_diff', 'argmax_agreement'):
                row[f'{runtime}_{key}'] = self.runtimes.get(runtime, {}).get(key, float('nan'))
        return row


def timed_ms(run) -> float:
    """Milliseconds of ``run()``."""
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


def compare_backends(name: str, model, inputs: torch.Tensor, repeats: int = 5,
                     threads: int = 1, work_dir: str | None = None,
                     runtimes: tuple[str, ...] = RUNTIMES,
                     onnx_dir: str | None = None) -> ParityResult:
    """Export ``model`` at the size of ``inputs`` in each DFT form, then compare and time PyTorch
    and every runtime side by side (alternating in each round, the first round a warm-up).

    Args:
        name (str): Row label.
        model (nn.Module): A segmentor (its ``encode_decode`` is exported, as by
            :func:`.export_onnx`), or any module (e.g. :class:`MixerAlone`) taking ``inputs``.
        inputs (Tensor): ``(1, 3, H, W)`` from :func:`prepared_input`, or the module's input.
        repeats (int): Timed rounds. Default: 5.
        threads (int): torch, onnxruntime and OpenVINO threads. Default: 1.
        work_dir (str, optional): Where the .onnx files go (a temporary folder if None).
            Default: None.
        runtimes (tuple[str, ...]): Subset of ``RUNTIMES``. Default: all.
        onnx_dir (str, optional): Keep the exported files there, ``NAME-SIZE-FORM.onnx``
            (for ``tools/deployment/profile_onnx.py``). Default: None (deleted).
    """
    torch.set_num_threads(threads)
    segmentor = hasattr(model, 'encode_decode')
    network = SegmentorLogits(model.eval()) if segmentor else model.eval()
    size = 'x'.join(map(str, inputs.shape[2:] if segmentor else model.hw_shape))
    if not segmentor:
        size = f'{inputs.shape[-1]} @ {size}'
    if onnx_dir:
        os.makedirs(onnx_dir, exist_ok=True)
    with (contextlib.nullcontext(onnx_dir) if onnx_dir else
          tempfile.TemporaryDirectory(dir=work_dir)) as folder:
        stem = osp.join(folder, f'{name}-{size}'.replace(' @ ', '@'))
        paths = {FORMS[runtime]: f'{stem}-{FORMS[runtime]}.onnx' for runtime in runtimes}
        start = time.perf_counter()
        for form, path in paths.items():
            export_network(network, inputs, path, form=form)
        export_seconds = time.perf_counter() - start
        sessions = {}
        for runtime in runtimes:
            open_session = openvino_session if runtime == 'openvino' else onnx_session
            sessions[runtime] = open_session(paths[FORMS[runtime]], threads=threads)
    feed = {INPUT_NAME: inputs.numpy()}
    with torch.no_grad():
        expected = network(inputs).numpy()
        actual = {runtime: session.run(None, feed)[0] for runtime, session in sessions.items()}
        times = {key: [] for key in ['torch', *sessions]}
        for _ in range(repeats + 1):
            times['torch'].append(timed_ms(lambda: network(inputs)))
            for runtime, session in sessions.items():
                times[runtime].append(timed_ms(lambda: session.run(None, feed)))
    medians = {key: statistics.median(values[1:]) for key, values in times.items()}
    results = {}
    for runtime, output in actual.items():
        agreement = (float((output.argmax(1) == expected.argmax(1)).mean()) if segmentor else
                     float('nan'))
        results[runtime] = dict(ms=round(medians[runtime], 2),
                                ratio=round(medians[runtime] / medians['torch'], 3),
                                max_abs_diff=float(np.abs(output - expected).max()),
                                argmax_agreement=agreement)
    return ParityResult(name, size, float(np.abs(expected).max()), round(medians['torch'], 2),
                        round(export_seconds, 1), results)


def markdown_table(results: list[ParityResult]) -> str:
    """The results as a Markdown table: time ratios to PyTorch eager per runtime, the op form's
    time over the matmul form's in onnxruntime, and the parity of every runtime."""
    lines = ['| model | input | ORT op / PyTorch | ORT matmul / PyTorch | OpenVINO / PyTorch | '
             'ORT op / matmul | max abs diff (op, matmul, OpenVINO) | max abs logit | '
             'lowest argmax agreement |', '|---|---|---|---|---|---|---|---|---|']
    for r in results:
        row = r.row()
        lowest = min((v['argmax_agreement'] for v in r.runtimes.values()), default=np.nan)
        agreement = '-' if np.isnan(lowest) else f'{100 * lowest:.3f}%'  # NaN: no classes
        diffs = ', '.join(f'{row[f"{runtime}_max_abs_diff"]:.1e}' for runtime in RUNTIMES)
        lines.append(f'| {r.model} | {r.input_hw} | {row["ort-op_ratio"]:.2f} | '
                     f'{row["ort-matmul_ratio"]:.2f} | {row["openvino_ratio"]:.2f} | '
                     f'{row["ort-op_ms"] / row["ort-matmul_ms"]:.2f} | {diffs} | '
                     f'{r.max_abs_logit:.3g} | {agreement} |')
    return '\n'.join(lines) + '\n'
