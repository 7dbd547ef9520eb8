"""Forward+backward time and peak memory of every token mixer at SegFormer-B3's stage widths.

For each dtype, B3 stage (channels 64/128/320/512, heads 1/2/5/8, ESA reduction 8/4/2/1) and
square token grid, every candidate below runs in the same loop: warm-up calls, then ``--repeats``
rounds in which each candidate is timed once (alternating order), so that all candidates of a
point see the same machine load. Reported: the median and the min/max over rounds, and, for
ratios, the median and min/max of the per-round ratios (paired in time).

Candidates:
    mixers      afno, afno25 (hard truncation 25%), afno-composed (AFNO from plain torch ops,
                the reference the fused path is tested against; off by default), gfn
                (gfn-composed: its composed reference, off by default), fnet, fno,
                esa (SegFormer's efficient self-attention), sa (full), axial.
    references  fft: the bare round trip ``irfft2(rfft2(x))`` of the same tokens, forward and
                backward (the backward is the same round trip, its own adjoint), with the
                layout changes every spectral mixer needs (tokens -> channels-first -> tokens)
                and nothing else; fft-torch: the same written with torch.fft and torch's own
                autograd; matmul / matmul-complex: ONE batched matmul with the multiply-adds of
                AFNO's block MLP on every mode (2 complex layers = per block a real
                (4fC/k x 2C/k) weight, or a complex (2fC/k x C/k) one); copy: ``x * w`` (one
                elementwise pass each way), a linear-time reference for the scaling exponents.
    AFNO's floor = fft + the faster of the two matmuls, per round (separate calls, summed).

Memory: on CUDA ``max_memory_allocated`` above what was allocated before the call; on CPU the
profiler's allocation events (``profile_memory=True``; every tensor torch allocates, not MKL's
internal FFT buffers): ``peak`` over forward+backward and ``held``, what the forward leaves
allocated for the backward (saved tensors plus the output). Inputs and parameters not counted.

A point is skipped (recorded, not run) when its time predicted from the candidate's smaller grids
exceeds ``--max-call-s`` or its memory ``--max-mem-gb``. Scaling exponents: least-squares slope of
log time vs log tokens over the grids in ``--fit-range``.

Usage::

    python tools/analysis/benchmark_mixers.py                       # CPU sweep, fp32 + bf16
    python tools/analysis/benchmark_mixers.py --quick --out /tmp/b  # seconds: widths / 8
    python tools/analysis/benchmark_mixers.py --device cuda         # fp32, fp16, bf16
"""
import argparse
import csv
import math
import os
import os.path as osp
import platform
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DTYPES = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}


@dataclass(frozen=True)
class Stage:
    index: int
    channels: int
    heads: int
    sr_ratio: int
    grid_at_1024: int  # the stage's grid for a 1024 x 1024 crop (stride 4, 8, 16, 32)


B3_STAGES = (Stage(1, 64, 1, 8, 256), Stage(2, 128, 2, 4, 128), Stage(3, 320, 5, 2, 64),
             Stage(4, 512, 8, 1, 32))
AFNO_BLOCKS = 8


def _mixers():
    from afno_seg.mixers import (AFNOMixer, AxialAttentionMixer, EfficientSelfAttentionMixer,
                                 FNetMixer, FNOMixer, FullSelfAttentionMixer, GlobalFilterMixer)
    return {
        'afno': lambda s, hw: AFNOMixer(s.channels, num_blocks=AFNO_BLOCKS),
        'afno25': lambda s, hw: AFNOMixer(s.channels, num_blocks=AFNO_BLOCKS,
                                          hard_thresholding_fraction=0.25),
        'afno-composed': lambda s, hw: AFNOMixer(s.channels, num_blocks=AFNO_BLOCKS, fused=False),
        # Filter stored at the measured grid, as when training at that crop (no resize).
        'gfn': lambda s, hw: GlobalFilterMixer(s.channels, base_hw_shape=hw),
        'gfn-composed': lambda s, hw: GlobalFilterMixer(s.channels, base_hw_shape=hw,
                                                        fused=False),
        'fnet': lambda s, hw: FNetMixer(s.channels),
        'fno': lambda s, hw: FNOMixer(s.channels),
        'esa': lambda s, hw: EfficientSelfAttentionMixer(s.channels, s.heads,
                                                         sr_ratio=min(s.sr_ratio, *hw)),
        'sa': lambda s, hw: FullSelfAttentionMixer(s.channels, s.heads),
        'axial': lambda s, hw: AxialAttentionMixer(s.channels, s.heads),
    }


MIXER_NAMES = ['afno', 'afno25', 'afno-composed', 'gfn', 'gfn-composed', 'fnet', 'fno', 'esa', 'sa',
               'axial']
REFERENCE_NAMES = ['fft', 'fft-torch', 'matmul', 'matmul-complex', 'copy']
DEFAULT_MIXERS = ['afno', 'afno25', 'gfn', 'fnet', 'fno', 'esa', 'sa', 'axial']
QUADRATIC = {'sa'}  # time ~ tokens^2: used to predict the next grid before any measurement
SPECTRAL_TO_FFT = ['afno', 'afno25', 'afno-composed', 'gfn', 'gfn-composed', 'fnet', 'fno']
ATTENTION = ['esa', 'sa', 'axial']


# ----------------------------------------------------------------------------- candidates
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


def _autocast(device: str, dtype_name: str):
    dtype = DTYPES[dtype_name]
    if dtype is None:
        return nullcontext
    return lambda: torch.autocast(device_type=device, dtype=dtype)


class _BareRoundTrip(torch.autograd.Function):
    """``irfft2(rfft2(x))`` over the grid of tokens; backward: the same (its own adjoint)."""

    @staticmethod
    def forward(ctx, x, hw_shape):
        ctx.hw_shape = hw_shape
        return _round_trip(x, hw_shape)

    @staticmethod
    def backward(ctx, grad):
        return _round_trip(grad, ctx.hw_shape), None


def _round_trip(x, hw_shape):
    from afno_seg.mixers.spectral import irfft2_to_tokens, rfft2_of_tokens
    return irfft2_to_tokens(rfft2_of_tokens(x, hw_shape), hw_shape)


def build_candidate(name: str, stage: Stage, grid: int, batch: int, device: str, dtype_name: str,
                    seed: int = 0, compile_: bool = False) -> Candidate:
    """Module or reference workload ``name`` on ``(batch, grid*grid, channels)`` fp32 tokens;
    ``compile_``: the module through ``torch.compile`` (named ``name+compile``)."""
    generator = torch.Generator().manual_seed(seed)
    hw, channels = (grid, grid), stage.channels
    x = torch.randn(batch, grid * grid, channels, generator=generator).to(device)
    x.requires_grad_(True)
    autocast = _autocast(device, dtype_name)()
    if name in MIXER_NAMES:
        torch.manual_seed(seed)
        module = _mixers()[name](stage, hw).to(device).train()
        gflop = batch * sum(module.flops(hw).values()) / 1e9
        call = torch.compile(module) if compile_ else module
        return Candidate(name + ('+compile' if compile_ else ''), lambda: call(x, hw),
                         [x, *module.parameters()], torch.randn_like(x), gflop, autocast)
    if name == 'fft':
        return Candidate(name, lambda: _BareRoundTrip.apply(x, hw), [x], torch.randn_like(x),
                         autocast=autocast)
    if name == 'fft-torch':
        def round_trip():
            spectrum = torch.fft.rfft2(x.view(batch, grid, grid, channels), dim=(1, 2),
                                       norm='ortho')
            return torch.fft.irfft2(spectrum, s=hw, dim=(1, 2), norm='ortho')
        return Candidate(name, round_trip, [x],
                         torch.randn(batch, grid, grid, channels, device=device),
                         autocast=autocast)
    if name in ('matmul', 'matmul-complex'):
        # (B k) independent products, the weight shared over the batch as in AFNO. bmm on an
        # expanded weight: torch.matmul's broadcast backward copies the whole spectrum.
        dtype = torch.float32 if name == 'matmul' else torch.complex64
        rows, inner = (4, 2) if name == 'matmul' else (2, 1)
        block, modes = channels // AFNO_BLOCKS, grid * (grid // 2 + 1)
        weight = (0.02 * torch.randn(rows * block, inner * block, generator=generator,
                                     dtype=dtype)).to(device).requires_grad_(True)
        spectrum = torch.randn(batch * AFNO_BLOCKS, inner * block, modes, generator=generator,
                               dtype=dtype).to(device).requires_grad_(True)
        grad = torch.randn(batch * AFNO_BLOCKS, rows * block, modes, dtype=dtype, device=device)
        return Candidate(name, lambda: torch.bmm(weight.expand(len(spectrum), -1, -1), spectrum),
                         [weight, spectrum], grad, autocast=autocast)
    if name == 'copy':
        scale = torch.ones(channels, device=device, requires_grad=True)
        return Candidate(name, lambda: x * scale, [x, scale], torch.randn_like(x),
                         autocast=autocast)
    raise KeyError(f'unknown candidate {name!r}; choose from {MIXER_NAMES + REFERENCE_NAMES}')


def parameter_bytes(name: str, stage: Stage, grid: int) -> int:
    """Bytes of a mixer's fp32 parameters, counted on the meta device (nothing allocated)."""
    if name not in MIXER_NAMES:
        return 0
    with torch.device('meta'):  # noqa: SIM117
        module = _mixers()[name](stage, (grid, grid))
    return 4 * sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------- measuring
def _synchronizer(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == 'cuda' else (lambda: None)


def time_interleaved(candidates: list[Candidate], repeats: int, warmup: int,
                     device: str) -> dict[str, list[float]]:
    """Seconds per fwd+bwd call: ``warmup`` untimed rounds, then ``repeats`` timed rounds, each
    running every candidate once (order reversed every other round)."""
    sync = _synchronizer(device)
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
    """``(peak, held)`` bytes of one fwd+bwd call beyond what existed before it (see docstring)."""
    if device == 'cuda':
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with candidate.autocast:
            out = candidate.forward()
        held = torch.cuda.memory_allocated() - base
        torch.autograd.grad(out, candidate.inputs, candidate.grad_out.to(out.dtype))
        del out
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, held
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with candidate.autocast:
            out = candidate.forward()
        with record_function('##backward##'):
            torch.autograd.grad(out, candidate.inputs, candidate.grad_out.to(out.dtype))
        del out
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    backward_start = min((e.start_ns() for e in events if e.name() == '##backward##'),
                         default=float('inf'))
    current = peak = held = 0
    for event in events:
        if event.name() != '[memory]' or event.device_type() != torch.autograd.DeviceType.CPU:
            continue
        if event.start_ns() < backward_start:
            held = current + event.nbytes()
        current += event.nbytes()
        peak = max(peak, current)
    return float(peak), float(held)


def fit_exponent(tokens: list[float], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(tokens)."""
    if len(tokens) < 2:
        return float('nan')
    xs, ys = [math.log(t) for t in tokens], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return (sum((a - mean_x) * (b - mean_y) for a, b in zip(xs, ys))
            / sum((a - mean_x) ** 2 for a in xs))


def paired_ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """Median, min, max of the per-round ratios (rounds are paired in time)."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    return statistics.median(ratios), min(ratios), max(ratios)


# ----------------------------------------------------------------------------- the sweep
def predict(history: list[tuple[int, float]], tokens: int, quadratic: bool) -> float:
    """Extrapolate a quantity measured at fewer tokens (local log-log slope, at least 1)."""
    if not history:
        return 0.0
    (n1, v1) = history[-1]
    if len(history) >= 2 and history[-2][1] > 0 and v1 > 0:
        n0, v0 = history[-2]
        slope = max(1.0, min(2.5, math.log(v1 / v0) / math.log(n1 / n0)))
    else:
        slope = 2.0 if quadratic else 1.2
    return v1 * (tokens / n1) ** slope


def run_sweep(args: argparse.Namespace, rows: list[dict]) -> None:
    """Measure every point, appending result rows to ``rows`` as they come."""
    names = args.names
    for dtype_name in args.dtypes:
        for stage in args.stage_list:
            time_history = {n: [] for n in names}
            memory_history = {n: [] for n in names}
            for grid in args.grids:
                tokens = grid * grid
                candidates, base = [], dict(device=args.device, dtype=dtype_name,
                                            stage=stage.index, channels=stage.channels,
                                            grid=grid, tokens=tokens, batch=args.batch)
                for name in names:
                    reason = skip_reason(name, stage, grid, args, time_history[name],
                                         memory_history[name])
                    if reason:
                        rows.append(dict(base, name=name, status=f'skipped: {reason}'))
                        continue
                    try:
                        candidates.append(build_candidate(
                            name.split('+')[0], stage, grid, args.batch, args.device, dtype_name,
                            compile_=name.endswith('+compile')))
                    except Exception as error:  # noqa: BLE001  (record it, go on)
                        rows.append(dict(base, name=name, status=error_text(error)))
                rows += measure_point(candidates, base, args, time_history, memory_history)
                del candidates
                if args.device == 'cuda':
                    torch.cuda.empty_cache()


def skip_reason(name, stage, grid, args, time_history, memory_history) -> str:
    """Why ``name`` is not run at this point ('' = run it). The stage's own B3 grid (1024 crop)
    gets 4x the time budget: the targets are measured there."""
    tokens, base_name = grid * grid, name.split('+')[0]
    quadratic = base_name in QUADRATIC
    param_mb = parameter_bytes(base_name, stage, grid) / 2**20
    if param_mb > args.max_param_mb:
        return f'{param_mb:.0f} MB of parameters > --max-param-mb {args.max_param_mb:g}'
    budget = args.max_call_s * (4 if grid == stage.grid_at_1024 else 1)
    predicted_s = predict(time_history, tokens, quadratic)
    if predicted_s > budget:
        return f'predicted {predicted_s:.1f} s/call > {budget:g} s (--max-call-s)'
    predicted_gb = (predict(memory_history, tokens, quadratic) + 3 * param_mb * 2**20) / 2**30
    if predicted_gb > args.max_mem_gb:
        return f'predicted {predicted_gb:.1f} GiB > --max-mem-gb {args.max_mem_gb:g}'
    return ''


def error_text(error: Exception) -> str:
    return f'error: {type(error).__name__}: {str(error).splitlines()[0][:160]}'


def measure_point(candidates, base, args, time_history, memory_history) -> list[dict]:
    rows = []
    try:
        times = time_interleaved(candidates, args.repeats, args.warmup, args.device)
    except Exception as error:  # noqa: BLE001  (e.g. out of memory: time them one by one)
        times, failed = {}, {}
        for candidate in candidates:
            try:
                times.update(time_interleaved([candidate], args.repeats, args.warmup,
                                              args.device))
            except Exception as single_error:  # noqa: BLE001
                failed[candidate.name] = error_text(single_error)
        rows += [dict(base, name=n, status=s) for n, s in failed.items()]
        candidates = [c for c in candidates if c.name in times]
        print(f'  (interleaved run failed: {error_text(error)}; timed one by one)', flush=True)
    for candidate in candidates:
        peak = held = float('nan')
        if not args.no_memory:
            peak, held = measure_memory(candidate, args.device)
        seconds = times[candidate.name]
        median = statistics.median(seconds)
        time_history[candidate.name].append((base['tokens'], median))
        if peak == peak:
            memory_history[candidate.name].append((base['tokens'], peak))
        rows.append(dict(base, name=candidate.name, status='ok', median_ms=1e3 * median,
                         min_ms=1e3 * min(seconds), max_ms=1e3 * max(seconds),
                         peak_mb=peak / 2**20, held_mb=held / 2**20, gflop_fwd=candidate.gflop,
                         times_ms=';'.join(f'{1e3 * s:.3f}' for s in seconds)))
        print(f"  {base['dtype']} stage {base['stage']} C={base['channels']} "
              f"{base['grid']}x{base['grid']} {candidate.name:>13}: {1e3 * median:9.2f} ms "
              f"[{1e3 * min(seconds):.2f}-{1e3 * max(seconds):.2f}]  peak {peak / 2**20:8.1f} MB",
              flush=True)
    return rows


# ----------------------------------------------------------------------------- reporting
FIELDS = ['device', 'dtype', 'stage', 'channels', 'grid', 'tokens', 'batch', 'name', 'status',
          'median_ms', 'min_ms', 'max_ms', 'peak_mb', 'held_mb', 'gflop_fwd', 'times_ms']


def _times(rows, dtype, stage, grid, name):
    for row in rows:
        if (row['dtype'], row['stage'], row['grid'], row['name']) == (dtype, stage, grid, name) \
                and row['status'] == 'ok':
            return [float(t) for t in row['times_ms'].split(';')]
    return None


def ratio_rows(rows: list[dict], stages, dtypes, grid_of) -> list[dict]:
    """Per dtype and stage (at ``grid_of(stage)``): the paired ratios the targets are about."""
    out = []
    for dtype in dtypes:
        for stage in stages:
            grid = grid_of(stage)
            get = lambda name: _times(rows, dtype, stage.index, grid, name)  # noqa: E731
            entry = dict(dtype=dtype, stage=stage.index, channels=stage.channels, grid=grid)
            fft, afno = get('fft'), get('afno')
            matmuls = [t for t in (get('matmul'), get('matmul-complex')) if t]
            if fft and matmuls:
                floor = [f + min(m) for f, *m in zip(fft, *matmuls)]
                if afno:
                    entry['afno/floor'] = paired_ratio(afno, floor)
            for name in SPECTRAL_TO_FFT:
                if fft and get(name):
                    entry[f'{name}/fft'] = paired_ratio(get(name), fft)
            if get('fft-torch') and fft:
                entry['fft-torch/fft'] = paired_ratio(get('fft-torch'), fft)
            for name in ATTENTION + ['afno+compile', 'afno-composed']:
                if afno and get(name):
                    entry[f'{name}/afno'] = paired_ratio(get(name), afno)
            if get('gfn') and get('gfn-composed'):
                entry['gfn-composed/gfn'] = paired_ratio(get('gfn-composed'), get('gfn'))
            out.append(entry)
    return out


def exponent_rows(rows: list[dict], names, dtypes, stages, fit_range) -> list[dict]:
    out = []
    low, high = fit_range[0] ** 2, fit_range[1] ** 2
    for dtype in dtypes:
        for stage in stages:
            entry = dict(dtype=dtype, stage=stage.index, channels=stage.channels)
            for name in names:
                measured = sorted((r['tokens'], r['median_ms']) for r in rows
                                  if (r['dtype'], r['stage'], r['name']) ==
                                  (dtype, stage.index, name) and r['status'] == 'ok')
                points = [p for p in measured if low <= p[0] <= high]
                if len(points) < 2:  # e.g. full attention: fit what could be run, say which
                    points = [p for p in measured if p[0] <= high][-3:]
                if len(points) >= 2:
                    entry[name] = (fit_exponent(*zip(*points)),
                                   f'{int(math.isqrt(points[0][0]))}-'
                                   f'{int(math.isqrt(points[-1][0]))}')
            out.append(entry)
    return out


def _fmt_ratio(value) -> str:
    if value is None:
        return ''
    median, low, high = value
    return f'{median:.2f} [{low:.2f}-{high:.2f}]'


def write_markdown(path, rows, ratios, exponents, args, started, load_before, load_after):
    names = args.names
    lines = [f'# Token-mixer benchmark: {args.device}, {" + ".join(args.dtypes)}', '',
             f'Command: `{args.command}`', '',
             f'Environment: {environment(args.device)}; torch threads {torch.get_num_threads()}; '
             f'CPU memory {args.cpu_memory}; '
             f'batch {args.batch}; {args.warmup} warm-up + {args.repeats} timed rounds, '
             f'candidates interleaved; started {started}; load average (1/5/15 min) '
             f'{load_before} at start, {load_after} at end.', '',
             'Times: forward+backward of one call (gradients of input and parameters), median '
             'over rounds [min-max]. Ratios: median [min-max] of the per-round ratios. '
             'floor = fft + matmul (see `tools/analysis/benchmark_mixers.py`).', '']
    ratio_keys = ['afno/floor'] + [f'{n}/fft' for n in SPECTRAL_TO_FFT] + ['fft-torch/fft'] + \
        [f'{n}/afno' for n in ATTENTION + ['afno+compile', 'afno-composed']] + \
        ['gfn-composed/gfn']
    ratio_keys = [k for k in ratio_keys if any(k in r for r in ratios)]
    if ratio_keys:
        lines += ['## Ratios at the B3 stage points', '',
                  '| dtype | stage | C @ grid | ' + ' | '.join(ratio_keys) + ' |',
                  '|---|---|---|' + '---|' * len(ratio_keys)]
        for r in ratios:
            lines.append(f"| {r['dtype']} | {r['stage']} | {r['channels']} @ {r['grid']}x"
                         f"{r['grid']} | " + ' | '.join(_fmt_ratio(r.get(k)) for k in ratio_keys)
                         + ' |')
        lines.append('')
    lines += [f'## Scaling exponents p (time ~ tokens^p, grids {args.fit_range[0]}-'
              f'{args.fit_range[1]}; where fewer than two of those ran, the grids fitted are '
              'given)', '',
              '| dtype | stage | ' + ' | '.join(names) + ' |', '|---|---|' + '---|' * len(names)]
    for e in exponents:
        cells = [f'{e[n][0]:.2f}' + ('' if e[n][1] == f'{args.fit_range[0]}-{args.fit_range[1]}'
                                     else f' ({e[n][1]})') if n in e else '' for n in names]
        lines.append(f"| {e['dtype']} | {e['stage']} ({e['channels']}) | " + ' | '.join(cells)
                     + ' |')
    lines.append('')
    for dtype in args.dtypes:
        for stage in args.stage_list:
            lines += [f'## {dtype}, stage {stage.index}: {stage.channels} channels, '
                      f'{stage.heads} heads, ESA reduction {stage.sr_ratio}', '',
                      'ms [min-max] / peak MB (held for backward MB)', '',
                      '| grid | ' + ' | '.join(names) + ' |', '|---|' + '---|' * len(names)]
            for grid in args.grids:
                cells = []
                for name in names:
                    row = next((r for r in rows if (r['dtype'], r['stage'], r['grid'], r['name'])
                                == (dtype, stage.index, grid, name)), None)
                    if row is None:
                        cells.append('')
                    elif row['status'] != 'ok':
                        cells.append('skip' if row['status'].startswith('skipped') else 'error')
                    else:
                        cells.append(f"{row['median_ms']:.1f} [{row['min_ms']:.1f}-"
                                     f"{row['max_ms']:.1f}] / {row['peak_mb']:.0f} "
                                     f"({row['held_mb']:.0f})")
                lines.append(f'| {grid}x{grid} | ' + ' | '.join(cells) + ' |')
            lines.append('')
    notes = sorted({(r['name'], r['status']) for r in rows if r['status'] != 'ok'})
    if notes:
        lines += ['## Not measured', ''] + [f'- {n}: {s}' for n, s in notes[:60]] + ['']
    with open(path, 'w') as f:
        f.write('\n'.join(lines))


def write_plot(path_prefix, rows, args) -> list[str]:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    written = []
    names = args.names
    for dtype in args.dtypes:
        stages = args.stage_list
        panels = ['fwd+bwd ms'] + ([] if args.no_memory else ['peak MB'])  # no memory: no zeros
        fig, axes = plt.subplots(len(panels), len(stages), squeeze=False,
                                 figsize=(4 * len(stages), 3.25 * len(panels)))
        for column, stage in enumerate(stages):
            for name in names:
                points = sorted((r['tokens'], r['median_ms'], r['peak_mb']) for r in rows
                                if (r['dtype'], r['stage'], r['name']) == (dtype, stage.index, name)
                                and r['status'] == 'ok')
                if not points:
                    continue
                tokens, ms, mb = zip(*points)
                style = dict(linestyle='--' if name in REFERENCE_NAMES else '-', marker='o', ms=3,
                             color=plt.get_cmap('tab20')(names.index(name) % 20), label=name)
                for axis, values in zip(axes[:, column], (ms, mb)):
                    axis.plot(tokens, values, **style)
            axes[0][column].set_title(f'stage {stage.index}: C={stage.channels}', fontsize=9)
            axes[-1][column].set_xlabel('tokens (H x W)', fontsize=8)
            for row_index, label in enumerate(panels):
                axis = axes[row_index][column]
                axis.set_xscale('log')
                axis.set_yscale('log')
                axis.tick_params(labelsize=7)
                axis.grid(True, which='major', alpha=0.3)
                if column == 0:
                    axis.set_ylabel(label, fontsize=8)
        axes[0][0].legend(fontsize=7, ncol=2)
        fig.suptitle(f'Token mixers, {args.device} {dtype}, batch {args.batch}', fontsize=10)
        fig.tight_layout()
        path = f'{path_prefix}_{dtype}.png'
        fig.savefig(path, dpi=60)
        plt.close(fig)
        written.append(path)
    return written


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


def write_csv(path: str, rows: list[dict], fields: list[str]) -> None:
    """``rows`` as CSV with columns ``fields`` (others dropped), floats to 4 significant digits."""
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f'{v:.4g}' if isinstance(v, float) else v)
                             for k, v in row.items() if k in fields})


def load_average() -> str:
    try:
        return '/'.join(f'{v:.2f}' for v in os.getloadavg())
    except OSError:
        return 'n/a'


# ----------------------------------------------------------------------------- command line
def parse_run_arguments(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Add what both benchmark scripts take (threads, CPU memory, output), parse, and record the
    command line as ``args.command``."""
    parser.add_argument('--threads', type=int, default=1, help='torch CPU threads')
    parser.add_argument('--cpu-memory', choices=['cache', 'default'], default='cache',
                        help="'cache': keep freed memory in the heap as tools/train.py does on a "
                        "CPU (afno_seg.engine.cpu_memory); 'default': glibc's mmap per large "
                        "tensor")
    parser.add_argument('--out', default=osp.join(ROOT, 'docs', 'benchmarks'))
    parser.add_argument('--tag', default='', help='suffix of the output file names')
    args = parser.parse_args(argv)
    args.command = ' '.join(['python', osp.relpath(osp.abspath(sys.argv[0]), ROOT)] +
                            list(sys.argv[1:] if argv is None else argv))
    return args


def prepare_run(args: argparse.Namespace) -> bool:
    """Check the device, set the threads and the CPU memory mode (``args.cpu_memory`` then says
    what is in effect). False, with a message, when CUDA is asked for and absent."""
    if args.device == 'cuda' and not torch.cuda.is_available():
        print('error: --device cuda but no CUDA device', file=sys.stderr)
        return False
    torch.set_num_threads(args.threads)
    if args.device == 'cpu' and args.cpu_memory == 'cache':
        from afno_seg.engine.cpu_memory import cache_freed_cpu_memory
        args.cpu_memory = 'cache' if cache_freed_cpu_memory() else 'default (no glibc)'
    return True


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--dtypes', nargs='+', choices=list(DTYPES),
                        help='fp32 and/or autocast dtypes (default: fp32 bf16)')
    parser.add_argument('--mixers', nargs='*', choices=MIXER_NAMES, default=DEFAULT_MIXERS)
    parser.add_argument('--references', nargs='*', choices=REFERENCE_NAMES,
                        default=REFERENCE_NAMES)
    parser.add_argument('--stages', nargs='+', type=int, choices=[1, 2, 3, 4],
                        default=[1, 2, 3, 4])
    parser.add_argument('--grids', nargs='+', type=int, help='square grid sizes '
                        '(default: 32 48 64 128 256 512)')
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5, help='timed rounds')
    parser.add_argument('--warmup', type=int, default=1, help='untimed rounds first')
    parser.add_argument('--compile', nargs='*', choices=MIXER_NAMES, default=[],
                        help='also run these mixers through torch.compile (NAME+compile); '
                        'compiling takes tens of seconds per grid')
    parser.add_argument('--max-call-s', type=float, default=1.0,
                        help='skip a point whose predicted fwd+bwd seconds exceed this '
                        '(4x this at each stage\'s own B3 grid)')
    parser.add_argument('--max-param-mb', type=float, default=100.0,
                        help='skip a mixer with more parameter MB (FNO at wide stages)')
    parser.add_argument('--max-mem-gb', type=float, help='skip a point predicted to need more '
                        '(default: a quarter of RAM on CPU, 90%% of the GPU)')
    parser.add_argument('--fit-range', nargs=2, type=int, default=[64, 256],
                        metavar=('MIN_GRID', 'MAX_GRID'))
    parser.add_argument('--no-memory', action='store_true', help='skip memory measurement')
    parser.add_argument('--no-plot', action='store_true')
    parser.add_argument('--quick', action='store_true', help='smoke test: widths / 8, grids 8 '
                        'and 16, batch 1, 1 round, no warm-up')
    args = parse_run_arguments(parser, argv)
    args.dtypes = args.dtypes or (['fp32', 'bf16'] if args.device == 'cpu' else
                                  ['fp32', 'fp16', 'bf16'])
    stages = B3_STAGES
    if args.quick:
        stages = tuple(Stage(s.index, s.channels // 8, s.heads, s.sr_ratio, s.grid_at_1024 // 16)
                       for s in B3_STAGES)
        args.grids = args.grids or [8, 16]
        args.batch, args.repeats, args.warmup = 1, 1, 0
    args.grids = sorted(args.grids or [32, 48, 64, 128, 256, 512])
    args.stage_list = [s for s in stages if s.index in args.stages]
    args.names = args.mixers + [f'{n}+compile' for n in args.compile] + args.references
    if args.max_mem_gb is None:
        if args.device == 'cuda':
            args.max_mem_gb = 0.9 * torch.cuda.get_device_properties(0).total_memory / 2**30
        else:
            pages = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
            args.max_mem_gb = pages / 4 / 2**30
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not prepare_run(args):
        return 1
    if args.device == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
    import afno_seg.mixers  # noqa: F401  (registers the mixers)
    started, load_before = time.strftime('%Y-%m-%d %H:%M:%S %Z'), load_average()
    wall = time.perf_counter()
    rows, interrupted = [], False
    try:
        run_sweep(args, rows)
    except KeyboardInterrupt:  # e.g. a time limit: write what was measured
        interrupted = True
        print('interrupted: writing the points measured so far', flush=True)
    if interrupted:
        args.command += '  (INTERRUPTED: partial results)'
    load_after = load_average()
    os.makedirs(args.out, exist_ok=True)
    stem = osp.join(args.out, f'mixers_{args.device}{args.tag}')
    write_csv(stem + '.csv', rows, FIELDS)
    grid_of = lambda s: min(args.grids, key=lambda g: abs(g - s.grid_at_1024))  # noqa: E731
    ratios = ratio_rows(rows, args.stage_list, args.dtypes, grid_of)
    exponents = exponent_rows(rows, args.names, args.dtypes, args.stage_list, args.fit_range)
    write_markdown(stem + '.md', rows, ratios, exponents, args, started, load_before, load_after)
    written = [stem + '.csv', stem + '.md']
    if not args.no_plot:
        written += write_plot(stem, rows, args)
    print(f'\n{len(rows)} rows in {time.perf_counter() - wall:.0f} s; wrote ' + ', '.join(written))
    for r in ratios:
        print(f"{r['dtype']} stage {r['stage']} ({r['channels']} @ {r['grid']}): " +
              ', '.join(f'{k} {_fmt_ratio(v)}' for k, v in r.items() if '/' in k))
    return 3 if interrupted else 0


if __name__ == '__main__':
    sys.exit(main())
