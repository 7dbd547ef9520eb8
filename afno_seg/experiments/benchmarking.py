"""What ``tools/analysis/benchmark_mixers.py`` and ``benchmark_model.py`` share: candidates timed
in interleaved rounds, memory of one call, paired ratios, scaling fits, the environment line.

No speed target is asserted anywhere (machines are shared and noisy): the reports give ratios of
candidates run side by side, written with the command line.
"""
import csv
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from ..analysis.memory import SavedTensorBytes, peak_bytes

__all__ = ['DTYPES', 'Candidate', 'environment', 'error_text', 'fit_exponent', 'load_average',
           'measure_memory', 'paired_ratio', 'predict', 'prepare_run',
           'time_interleaved', 'write_csv']

DTYPES = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}


@dataclass
class Candidate:
    """One fwd+bwd workload: ``forward()`` builds the graph, ``inputs`` get gradients."""
    name: str
    forward: Callable[[], torch.Tensor]
    inputs: list
    grad_out: torch.Tensor
    gflop: float = float('nan')  # analytic forward GFLOPs of the batch (mixers only)
    autocast: object = field(default_factory=nullcontext)

    def step(self) -> None:
        with self.autocast:
            out = self.forward()
        torch.autograd.grad(out, self.inputs, self.grad_out.to(out.dtype))


def time_interleaved(candidates: list[Candidate], repeats: int, warmup: int,
                     device: str) -> dict[str, list[float]]:
    """Seconds per fwd+bwd call: ``warmup`` untimed rounds, then ``repeats`` timed rounds, each
    running every candidate once (order reversed every other round)."""
    sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)
    for _ in range(warmup):
        for candidate in candidates:
            candidate.step()
    times = {c.name: [] for c in candidates}
    for round_index in range(repeats):
        ordered = candidates if round_index % 2 == 0 else candidates[::-1]
        for candidate in ordered:
            sync()
            start = time.perf_counter()
            candidate.step()
            sync()
            times[candidate.name].append(time.perf_counter() - start)
    return times


def measure_memory(candidate: Candidate, device: str) -> tuple[float, float]:
    """``(peak, held)`` bytes of one fwd+bwd call: peak beyond what existed before it, held the
    tensors the forward saves for backward but its inputs and parameters."""
    held = SavedTensorBytes(candidate.inputs)
    with held:
        peak = peak_bytes(candidate.step, device)
    return peak, float(held.bytes)


def fit_exponent(tokens: list[float], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(tokens)."""
    if len(tokens) < 2:
        return float('nan')
    return statistics.linear_regression([math.log(t) for t in tokens],
                                        [math.log(s) for s in seconds]).slope


def paired_ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """Median, min, max of the per-round ratios (rounds are paired in time)."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    return statistics.median(ratios), min(ratios), max(ratios)


def predict(history: list[tuple[int, float]], tokens: int, first_slope: float = 1.2) -> float:
    """Extrapolate a quantity measured at fewer tokens: the local log-log slope of the last two
    points (clamped to [1, 2.5]); with one point, ``first_slope`` (e.g. the analytic FLOP
    exponent of the mixer)."""
    if not history:
        return 0.0
    (n1, v1) = history[-1]
    if len(history) >= 2 and history[-2][1] > 0 and v1 > 0:
        n0, v0 = history[-2]
        slope = max(1.0, min(2.5, math.log(v1 / v0) / math.log(n1 / n0)))
    else:
        slope = first_slope
    return v1 * (tokens / n1) ** slope


def error_text(error: Exception) -> str:
    return f'error: {type(error).__name__}: {str(error).splitlines()[0][:160]}'


def environment(device: str) -> str:
    if device == 'cuda':
        name = torch.cuda.get_device_name()
        return f'{name}, torch {torch.__version__}, CUDA {torch.version.cuda}'
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            cpu = next(line.split(':', 1)[1].strip() for line in f if 'model name' in line)
    except (OSError, StopIteration):
        pass
    return f'{cpu} ({os.cpu_count()} logical CPUs), torch {torch.__version__}'


def write_csv(path, rows: list[dict], fields: list[str], digits: int = 4) -> None:
    """``rows`` as CSV with columns ``fields`` (others dropped), floats to ``digits`` digits."""
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction='ignore')
        writer.writeheader()
        writer.writerows({k: (f'{v:.{digits}g}' if isinstance(v, float) else v)
                          for k, v in row.items()} for row in rows)


def load_average() -> str:
    try:
        return '/'.join(f'{v:.2f}' for v in os.getloadavg())
    except OSError:
        return 'n/a'


def prepare_run(args) -> None:
    """Check ``args.device`` (a UserError line), set ``args.threads`` and the CPU memory mode
    ``args.cpu_memory`` ('cache': freed memory kept in the heap as tools/train.py keeps it on a
    CPU, :mod:`afno_seg.engine.cpu_memory`; then it says what is in effect)."""
    from afno_seg.engine.errors import check_device
    check_device(args.device)
    torch.set_num_threads(args.threads)
    if args.device == 'cpu' and args.cpu_memory == 'cache':
        from afno_seg.engine.cpu_memory import cache_freed_cpu_memory
        args.cpu_memory = 'cache' if cache_freed_cpu_memory() else 'default (no glibc)'
