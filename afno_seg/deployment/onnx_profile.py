"""Where an exported graph spends its time in onnxruntime: kernel time per operator type and per
node, from onnxruntime's own profiler (``SessionOptions.enable_profiling``).

The first run is a warm-up (the arena grows, memory is touched for the first time) and is left
out; the other runs are averaged. What runs is the graph as onnxruntime optimised it, so node
names are the optimised ones (``conv2d_89_nchwc``: a Conv in NCHWc blocks, an Add fused into it).
Times are a shared machine's: compare shares within one profile, not milliseconds across runs.
"""
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..engine.errors import UserError
from .benchmark import timed_ms
from .onnx_export import onnx_session

__all__ = ['NodeTime', 'OnnxProfile', 'profile_onnx']


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

    def table(self, top: int = 20) -> str:
        """Markdown: a header line, the operator types, then the ``top`` nodes."""
        total = self.kernel_ms or 1.0
        lines = [f'`{self.path}`: {self.threads} thread(s), mean of {len(self.run_ms)} runs after '
                 f'a warm-up; wall {np.mean(self.run_ms):.1f} ms a run, kernel time '
                 f'{self.kernel_ms:.1f} ms a run', '',
                 '| op | ms a run | share | nodes |', '|---|---|---|---|']
        counts = Counter(node.op for node in self.nodes)
        lines += [f'| {op} | {ms:.2f} | {ms / total:.1%} | {counts[op]} |'
                  for op, ms in self.ops.items()]
        lines += ['', f'| node (top {top}) | op | ms a run | share | input shapes |',
                  '|---|---|---|---|---|']
        lines += [f'| {n.name} | {n.op} | {n.ms:.2f} | {n.ms / total:.1%} | {n.inputs} |'
                  for n in self.nodes[:top]]
        return '\n'.join(lines)


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
