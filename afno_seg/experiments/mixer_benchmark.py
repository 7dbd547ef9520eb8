"""Forward+backward time and peak memory of every token mixer at SegFormer-B3's stage widths.

The machinery of ``tools/analysis/benchmark_mixers.py`` (its docstring has the method): the
catalogue's variants, each also as ``NAME-composed`` (its ``reference`` form,
:mod:`afno_seg.mixers.forms`), built with the stage's arguments; beside them the reference
workloads: the bare FFT round trip, matmuls, a copy.
"""
import math
import statistics
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..backbones.stage import build_mixer, stage_arguments
from ..mixers.catalogue import find_variant, mixer_catalogue
from ..mixers.fast.transforms import irfft2_to_tokens, rfft2_of_tokens
from ..mixers.forms import declared_forms, use_form
from .benchmarking import (
    DTYPES,
    Candidate,
    error_text,
    fit_exponent,
    measure_memory,
    paired_ratio,
    predict,
    time_interleaved,
)

__all__ = ['AFNO_BLOCKS', 'B3_STAGES', 'FIELDS', 'REFERENCE_NAMES', 'Stage', 'attention_names',
           'build_candidate', 'default_mixers', 'exponent_rows', 'mixer_names', 'ratio_rows',
           'rows_by_point', 'run_sweep', 'spectral_names']


@dataclass(frozen=True)
class Stage:
    index: int
    channels: int
    heads: int
    sr_ratio: int
    grid_at_1024: int  # the stage's grid for a 1024 x 1024 crop (stride 4, 8, 16, 32)


B3_STAGES = (Stage(1, 64, 1, 8, 256), Stage(2, 128, 2, 4, 128), Stage(3, 320, 5, 2, 64),
             Stage(4, 512, 8, 1, 32))
AFNO_BLOCKS = 8  # the matmul references carry the multiply-adds of AFNO-100%'s block MLP
REFERENCE_NAMES = ['fft', 'fft-torch', 'matmul', 'matmul-complex', 'copy']
COMPOSED = '-composed'


def mixer_names() -> list[str]:
    """Every catalogue variant, and ``NAME-composed`` of those with a ``fast`` form."""
    entries = mixer_catalogue(include_unlisted=True)
    return [e.name for e in entries] + [e.name + COMPOSED for e in entries
                                        if 'fast' in declared_forms(e.cls)]


def default_mixers() -> list[str]:
    return [entry.name for entry in mixer_catalogue()]


def spectral_names() -> list[str]:
    """Variants compared against the FFT round trip."""
    return [name for name in mixer_names() if find_variant(name.removesuffix(COMPOSED)).spectral]


def attention_names() -> list[str]:
    """Variants compared against AFNO (everything that is not spectral)."""
    return [e.name for e in mixer_catalogue(include_unlisted=True) if not e.spectral]


def build_stage_mixer(name: str, stage: Stage, hw: tuple[int, int]) -> torch.nn.Module:
    entry = find_variant(name.removesuffix(COMPOSED))
    args = stage_arguments(stage.channels, stage.heads, min(stage.sr_ratio, *hw), hw)
    return build_mixer(entry.config, **args)


def _meta_mixer(name: str, stage: Stage, grid: int) -> torch.nn.Module:
    """The mixer on the meta device (nothing allocated): for its FLOPs and parameter count."""
    with torch.device('meta'):
        return build_stage_mixer(name, stage, (grid, grid))


def flop_exponent(name: str, stage: Stage, grid: int) -> float:
    """Analytic growth of the mixer's FLOPs from ``grid`` to ``2 grid`` (4x the tokens), as a
    power of the tokens: about 1 for the Fourier mixers, 2 for full attention."""
    mixer = _meta_mixer(name, stage, grid)
    small, large = (sum(mixer.flops((n, n)).values()) for n in (grid, 2 * grid))
    return max(1.0, min(2.5, math.log(large / small) / math.log(4)))


class _BareRoundTrip(torch.autograd.Function):
    """``irfft2(rfft2(x))`` over the grid of tokens; backward: the same (its own adjoint)."""

    @staticmethod
    def forward(ctx, x, hw_shape):
        ctx.hw_shape = hw_shape
        return irfft2_to_tokens(rfft2_of_tokens(x, hw_shape), hw_shape)

    @staticmethod
    def backward(ctx, grad):
        return _BareRoundTrip.forward(ctx, grad, ctx.hw_shape), None


def build_candidate(name: str, stage: Stage, grid: int, batch: int, device: str, dtype_name: str,
                    seed: int = 0, compile_: bool = False) -> Candidate:
    """Module or reference workload ``name`` on ``(batch, grid*grid, channels)`` fp32 tokens;
    ``compile_``: the module through ``torch.compile`` (named ``name+compile``)."""
    generator = torch.Generator().manual_seed(seed)
    hw, channels = (grid, grid), stage.channels
    x = torch.randn(batch, grid * grid, channels, generator=generator).to(device).requires_grad_()
    dtype = DTYPES[dtype_name]
    autocast = nullcontext() if dtype is None else torch.autocast(device_type=device, dtype=dtype)
    if name in mixer_names():
        torch.manual_seed(seed)
        module = build_stage_mixer(name, stage, hw).to(device).train()
        call = torch.compile(module) if compile_ else module

        def forward():
            with use_form('reference') if name.endswith(COMPOSED) else nullcontext():
                return call(x, hw)
        return Candidate(name + ('+compile' if compile_ else ''), forward,
                         [x, *module.parameters()], torch.randn_like(x),
                         batch * sum(module.flops(hw).values()) / 1e9, autocast)
    if name == 'fft':
        return Candidate(name, lambda: _BareRoundTrip.apply(x, hw), [x], torch.randn_like(x),
                         autocast=autocast)
    if name == 'fft-torch':
        def round_trip():
            spectrum = torch.fft.rfft2(x.view(batch, grid, grid, channels), dim=(1, 2),
                                       norm='ortho')
            return torch.fft.irfft2(spectrum, s=hw, dim=(1, 2), norm='ortho')
        return Candidate(name, round_trip, [x],
                         torch.randn(batch, grid, grid, channels, device=device), autocast=autocast)
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
    raise KeyError(f'unknown candidate {name!r}; choose from '
                   f'{mixer_names() + REFERENCE_NAMES}')


def run_sweep(args, rows: list[dict]) -> None:
    """Measure every point, appending result rows to ``rows`` as they come. ``args``: the options
    of ``tools/analysis/benchmark_mixers.py`` (names, dtypes, stage_list, grids, batch, ...)."""
    names = args.names
    for dtype_name in args.dtypes:
        for stage in args.stage_list:
            time_history = {n: [] for n in names}
            memory_history = {n: [] for n in names}
            for grid in args.grids:
                candidates, base = [], dict(device=args.device, dtype=dtype_name,
                                            stage=stage.index, channels=stage.channels,
                                            grid=grid, tokens=grid * grid, batch=args.batch)
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
    slope, param_mb = 1.2, 0.0  # a reference workload: no parameters, about linear
    if base_name in mixer_names():
        slope = flop_exponent(base_name, stage, grid)
        parameters = sum(p.numel() for p in _meta_mixer(base_name, stage, grid).parameters())
        param_mb = 4 * parameters / 2**20  # fp32
    if param_mb > args.max_param_mb:
        return f'{param_mb:.0f} MB of parameters > --max-param-mb {args.max_param_mb:g}'
    budget = args.max_call_s * (4 if grid == stage.grid_at_1024 else 1)
    predicted_s = predict(time_history, tokens, slope)
    if predicted_s > budget:
        return f'predicted {predicted_s:.1f} s/call > {budget:g} s (--max-call-s)'
    predicted_gb = (predict(memory_history, tokens, slope) + 3 * param_mb * 2**20) / 2**30
    if predicted_gb > args.max_mem_gb:
        return f'predicted {predicted_gb:.1f} GiB > --max-mem-gb {args.max_mem_gb:g}'
    return ''


def measure_point(candidates, base, args, time_history, memory_history) -> list[dict]:
    rows = []
    try:
        times = time_interleaved(candidates, args.repeats, args.warmup, args.device)
    except Exception as error:  # noqa: BLE001  (e.g. out of memory: time them one by one)
        times, failed = {}, {}
        for candidate in candidates:
            try:
                times.update(time_interleaved([candidate], args.repeats, args.warmup, args.device))
            except Exception as single_error:  # noqa: BLE001
                failed[candidate.name] = error_text(single_error)
        rows += [dict(base, name=n, status=s) for n, s in failed.items()]
        candidates = [c for c in candidates if c.name in times]
        print(f'  (interleaved run failed: {error_text(error)}; timed one by one)', flush=True)
    for candidate in candidates:
        peak, held = (math.nan,) * 2 if args.no_memory else measure_memory(candidate, args.device)
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


FIELDS = ['device', 'dtype', 'stage', 'channels', 'grid', 'tokens', 'batch', 'name', 'status',
          'median_ms', 'min_ms', 'max_ms', 'peak_mb', 'held_mb', 'gflop_fwd', 'times_ms']


def rows_by_point(rows: list[dict]) -> dict[tuple, dict]:
    """``(dtype, stage, grid, name) -> row``: the first row of each point."""
    points = {}
    for row in rows:
        points.setdefault((row['dtype'], row['stage'], row['grid'], row['name']), row)
    return points


def ratio_rows(rows: list[dict], stages, dtypes, grid_of) -> list[dict]:
    """Per dtype and stage (at ``grid_of(stage)``): the paired ratios the targets are about."""
    points, out = rows_by_point(rows), []
    spectral, attention = spectral_names(), attention_names()
    pairs = ([(name, 'fft') for name in spectral + ['fft-torch']]
             + [(name, 'afno') for name in attention + ['afno' + COMPOSED]]
             + [(f'{name}+compile', name) for name in spectral + attention]  # against eager
             + [(name, name.removesuffix(COMPOSED)) for name in spectral  # against the fast form
                if name.endswith(COMPOSED) and name != 'afno' + COMPOSED])
    for dtype in dtypes:
        for stage in stages:
            grid = grid_of(stage)

            def get(name):
                row = points.get((dtype, stage.index, grid, name), {})
                return [float(t) for t in row['times_ms'].split(';')] \
                    if row.get('status') == 'ok' else None
            entry = dict(dtype=dtype, stage=stage.index, channels=stage.channels, grid=grid)
            fft, afno = get('fft'), get('afno')
            matmuls = [t for t in (get('matmul'), get('matmul-complex')) if t]
            if fft and matmuls and afno:
                entry['afno/floor'] = paired_ratio(afno, [f + min(m)
                                                          for f, *m in zip(fft, *matmuls)])
            for numerator, denominator in pairs:
                if get(numerator) and get(denominator):
                    entry[f'{numerator}/{denominator}'] = paired_ratio(get(numerator),
                                                                       get(denominator))
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
                                   f'{math.isqrt(points[0][0])}-{math.isqrt(points[-1][0])}')
            out.append(entry)
    return out
