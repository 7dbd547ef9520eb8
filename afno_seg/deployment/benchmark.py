"""onnxruntime (DFT op and matmul forms) and OpenVINO against PyTorch: logit parity and CPU time;
where a graph spends its time in onnxruntime (docs/inference.md).

* :func:`compare_backends`: each model exported at its input's size in both DFT forms, PyTorch
  and the runtimes alternating in each timed round on the same threads; ratios of the medians
  are reported (absolute times on a shared machine are noise).
* :func:`profile_onnx`: kernel time per operator type and per node of the optimised graph, from
  onnxruntime's own profiler (``SessionOptions.enable_profiling``), the warm-up run left out.
"""
import contextlib
import json
import os
import os.path as osp
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..engine.errors import UserError
from .onnx_export import INPUT_NAME, SegmentorLogits, export_network, onnx_session
from .predictor import openvino_session

__all__ = ['RUNTIMES', 'NodeTime', 'OnnxProfile', 'ParityResult',
           'compare_backends', 'profile_onnx', 'timed_ms']

FORMS = {'ort-op': 'op', 'ort-matmul': 'matmul', 'openvino': 'matmul'}  # runtime: graph it runs
RUNTIMES = tuple(FORMS)


@dataclass
class ParityResult:
    """One model's comparison: per runtime (``RUNTIMES``) its median ms, ``ratio`` to PyTorch,
    max abs logit difference and argmax agreement (NaN without classes)."""
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
    start = time.perf_counter()
    run()
    return 1e3 * (time.perf_counter() - start)


def compare_backends(name: str, model, inputs: torch.Tensor, repeats: int = 5, threads: int = 1,
                     runtimes: tuple[str, ...] = RUNTIMES,
                     onnx_dir: str | None = None) -> ParityResult:
    """Export ``model`` at the size of ``inputs`` in each DFT form, then compare and time PyTorch
    and every runtime side by side (alternating in each round, the first round a warm-up).

    Args:
        name (str): Row label.
        model (nn.Module): A segmentor (its ``encode_decode`` exported, as by
            :func:`.export_onnx`) or any module taking ``inputs`` (e.g. ``MixerAlone``).
        inputs (Tensor): The normalised image ``(1, 3, H, W)``, or the module's input.
        repeats (int): Timed rounds. Default: 5.
        threads (int): torch, onnxruntime and OpenVINO threads. Default: 1.
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
    with (contextlib.nullcontext(onnx_dir) if onnx_dir else
          tempfile.TemporaryDirectory()) as folder:
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


@dataclass
class NodeTime:
    """One node's kernel time, in ms a run; ``inputs``: its input shapes as onnxruntime's
    profiler lists them (without constant weights that a kernel packed in advance)."""
    name: str
    op: str
    ms: float
    inputs: str


@dataclass
class OnnxProfile:
    """Milliseconds a run: ``run_ms`` each profiled run's wall time, ``ops`` kernel time by
    operator type and ``nodes`` by node (both largest first)."""
    path: str
    threads: int
    run_ms: list[float]
    ops: dict[str, float] = field(default_factory=dict)
    nodes: list[NodeTime] = field(default_factory=list)

    @property
    def kernel_ms(self) -> float:
        return sum(self.ops.values())


def _random_feed(session, input_shape: list[int] | None) -> dict[str, np.ndarray]:
    """Normal random float32 inputs; a symbolic dimension needs ``input_shape``."""
    feed, rng = {}, np.random.default_rng(0)
    for graph_input in session.get_inputs():
        shape = list(graph_input.shape)
        if input_shape is not None:
            if len(input_shape) != len(shape):
                raise UserError(f'--input-shape has {len(input_shape)} dimensions, input '
                                f'{graph_input.name!r} has {len(shape)} ({shape})')
            shape = list(input_shape)
        elif not all(isinstance(size, int) for size in shape):
            raise UserError(f'input {graph_input.name!r} has symbolic dimensions {shape}: give '
                            'its sizes with --input-shape')
        feed[graph_input.name] = rng.standard_normal(shape, dtype=np.float32)
    return feed


def _summarise(events: list[dict], skip_runs: int) -> tuple[dict[str, float], list[NodeTime]]:
    """Kernel time by op and by node, in microseconds summed over the runs after ``skip_runs``."""
    starts = sorted(e['ts'] for e in events if e.get('name') == 'model_run')
    start = starts[skip_runs] if len(starts) > skip_runs else 0
    ops, nodes = {}, {}
    for event in events:
        if (event.get('cat') != 'Node' or not event['name'].endswith('_kernel_time') or
                event['ts'] < start):
            continue
        op, name = event['args'].get('op_name', '?'), event['name'][:-len('_kernel_time')]
        ops[op] = ops.get(op, 0.0) + event['dur']
        shapes = [list(s.values())[0] for s in event['args'].get('input_type_shape', [])]
        nodes.setdefault(name, NodeTime(name, op, 0.0, ', '.join(
            'x'.join(map(str, s)) or 'scalar' for s in shapes))).ms += event['dur']
    return ops, list(nodes.values())


def profile_onnx(path: str, runs: int = 3, threads: int = 1,
                 input_shape: list[int] | None = None) -> OnnxProfile:
    """Profile ``runs`` runs of ``path`` (after one warm-up) on random inputs.

    Args:
        path (str): An ONNX file.
        runs (int): Profiled runs after the warm-up. Default: 3.
        threads (int): onnxruntime's intra-op threads. Default: 1.
        input_shape (list[int], optional): The input's shape where the graph's has symbolic
            dimensions (``--dynamic`` exports). Default: None.
    """
    if runs < 1:
        raise UserError(f'runs must be >= 1, got {runs}')
    with tempfile.TemporaryDirectory() as folder:
        session = onnx_session(path, threads=threads, profile_prefix=os.path.join(folder, 'ort'))
        feed = _random_feed(session, input_shape)
        session.run(None, feed)
        run_ms = [timed_ms(lambda: session.run(None, feed)) for _ in range(runs)]
        with open(session.end_profiling()) as f:
            events = json.load(f)
    ops, nodes = _summarise(events, skip_runs=1)
    scale = 1e-3 / runs  # microseconds over all runs -> ms a run
    for node in nodes:
        node.ms *= scale
    return OnnxProfile(path, threads, run_ms,
                       {op: us * scale for op, us in sorted(ops.items(), key=lambda i: -i[1])},
                       sorted(nodes, key=lambda n: -n.ms))
