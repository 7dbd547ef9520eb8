"""Forward+backward time and peak memory of every token mixer at SegFormer-B3's stage widths.

For each dtype, B3 stage (channels 64/128/320/512, heads 1/2/5/8, ESA reduction 8/4/2/1) and
square token grid, every candidate below runs in the same loop: warm-up calls, then ``--repeats``
rounds in which each candidate is timed once (alternating order), so that all candidates of a
point see the same machine load. Reported: the median and the min/max over rounds, and, for
ratios, the median and min/max of the per-round ratios (paired in time).

Candidates:
    mixers      every variant of the mixer catalogue (``afno_seg.mixers.mixer_catalogue``; the
                listed ones by default, e.g. afno, afno25, gfn, fnet, fno, esa, sa, axial; the
                composed references afno-composed and gfn-composed by name), built for the stage
                (GFN's filter stored at the measured grid, ESA's reduction capped by the grid).
    references  fft: the bare round trip ``irfft2(rfft2(x))`` of the same tokens, forward and
                backward (the backward is the same round trip, its own adjoint), with the
                layout changes every spectral mixer needs (tokens -> channels-first -> tokens)
                and nothing else; fft-torch: the same written with torch.fft and torch's own
                autograd; matmul / matmul-complex: ONE batched matmul with the multiply-adds of
                AFNO's block MLP on every mode (2 complex layers = per block a real
                (4fC/k x 2C/k) weight, or a complex (2fC/k x C/k) one); copy: ``x * w`` (one
                elementwise pass each way), a linear-time reference for the scaling exponents.
    AFNO's floor = fft + the faster of the two matmuls, per round (separate calls, summed).

Memory (``afno_seg.analysis.memory``): ``peak`` over forward+backward above what was allocated
before the call, on CUDA ``max_memory_allocated``, on CPU the profiler's allocation events
(``profile_memory=True``; every tensor torch allocates, not MKL's internal FFT buffers); ``held``,
the tensors the forward saves for the backward. Inputs and parameters not counted.

A point is skipped (recorded, not run) when its time predicted from the candidate's smaller grids
exceeds ``--max-call-s`` or its memory ``--max-mem-gb``. Scaling exponents: least-squares slope of
log time vs log tokens over the grids in ``--fit-range``.

Usage::

    python tools/analysis/benchmark_mixers.py                       # CPU sweep, fp32 + bf16
    python tools/analysis/benchmark_mixers.py --quick --out /tmp/b  # seconds: widths / 8
    python tools/analysis/benchmark_mixers.py --device cuda         # fp32, fp16, bf16
"""
import argparse
import os
import os.path as osp
import sys
import time

import torch

from afno_seg.analysis.report import markdown_table
from afno_seg.engine.errors import check_device
from afno_seg.experiments.benchmarking import (
    DTYPES,
    environment,
    load_average,
    prepare_run,
    write_csv,
)
from afno_seg.experiments.mixer_benchmark import (
    B3_STAGES,
    FIELDS,
    REFERENCE_NAMES,
    Stage,
    default_mixers,
    exponent_rows,
    mixer_names,
    ratio_rows,
    rows_by_point,
    run_sweep,
)
from afno_seg.figures import new_figure

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--dtypes', nargs='+', choices=list(DTYPES),
                        help='fp32 and/or autocast dtypes (default: fp32 bf16)')
    parser.add_argument('--mixers', nargs='*', choices=mixer_names(),
                        default=default_mixers())
    parser.add_argument('--references', nargs='*', choices=REFERENCE_NAMES,
                        default=REFERENCE_NAMES)
    parser.add_argument('--stages', nargs='+', type=int, choices=[1, 2, 3, 4],
                        default=[1, 2, 3, 4])
    parser.add_argument('--grids', nargs='+', type=int, help='square grid sizes '
                        '(default: 32 48 64 128 256 512)')
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5, help='timed rounds')
    parser.add_argument('--warmup', type=int, default=1, help='untimed rounds first')
    parser.add_argument('--compile', nargs='*', choices=mixer_names(),
                        help='also run these mixers (no names: every one of --mixers) through '
                        'torch.compile, as NAME+compile, timed in the same rounds as eager '
                        '(ratio NAME+compile/NAME); compiling takes tens of seconds per grid')
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
    parser.add_argument('--threads', type=int, default=1, help='torch CPU threads')
    parser.add_argument('--cpu-memory', choices=['cache', 'default'], default='cache',
                        help="'cache': keep freed memory in the heap as tools/train.py does on a "
                        "CPU (afno_seg.engine.cpu_memory); 'default': glibc's mmap per large "
                        "tensor")
    parser.add_argument('--out', default=osp.join(ROOT, 'docs', 'benchmarks'))
    parser.add_argument('--tag', default='', help='suffix of the output file names')
    args = parser.parse_args(argv)
    check_device(args.device)  # before the device's properties are read below
    args.command = ' '.join(['python', osp.relpath(__file__, ROOT),
                             *(sys.argv[1:] if argv is None else argv)])
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
    if args.compile == []:  # --compile alone: every mixer measured
        args.compile = list(args.mixers)
    args.names = (args.mixers + [f'{n}+compile' for n in args.compile or []] +
                  args.references)
    if args.max_mem_gb is None:
        if args.device == 'cuda':
            args.max_mem_gb = 0.9 * torch.cuda.get_device_properties(0).total_memory / 2**30
        else:
            pages = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
            args.max_mem_gb = pages / 4 / 2**30
    return args


def format_ratio(value) -> str:
    if value is None:
        return ''
    median, low, high = value
    return f'{median:.2f} [{low:.2f}-{high:.2f}]'


def _cell(row: dict | None) -> str:
    """A point of the per-stage tables: ms [min-max] / peak MB (held MB), or why it has none."""
    if row is None:
        return ''
    if row['status'] != 'ok':
        return 'skip' if row['status'].startswith('skipped') else 'error'
    return (f"{row['median_ms']:.1f} [{row['min_ms']:.1f}-{row['max_ms']:.1f}] / "
            f"{row['peak_mb']:.0f} ({row['held_mb']:.0f})")


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
    ratio_keys = list(dict.fromkeys(k for r in ratios for k in r if '/' in k))
    if ratio_keys:
        lines += ['## Ratios at the B3 stage points', '', *markdown_table(
            ['dtype', 'stage', 'C @ grid', *ratio_keys],
            ([r['dtype'], r['stage'], f"{r['channels']} @ {r['grid']}x{r['grid']}",
              *(format_ratio(r.get(k)) for k in ratio_keys)] for r in ratios)), '']
    fitted = f'{args.fit_range[0]}-{args.fit_range[1]}'
    lines += [f'## Scaling exponents p (time ~ tokens^p, grids {fitted}; where fewer than two of '
              'those ran, the grids fitted are given)', '', *markdown_table(
                  ['dtype', 'stage', *names],
                  ([e['dtype'], f"{e['stage']} ({e['channels']})",
                    *(f'{e[n][0]:.2f}' + ('' if e[n][1] == fitted else f' ({e[n][1]})')
                      if n in e else '' for n in names)] for e in exponents)), '']
    points = rows_by_point(rows)
    for dtype in args.dtypes:
        for stage in args.stage_list:
            lines += [f'## {dtype}, stage {stage.index}: {stage.channels} channels, '
                      f'{stage.heads} heads, ESA reduction {stage.sr_ratio}', '',
                      'ms [min-max] / peak MB (held for backward MB)', '', *markdown_table(
                          ['grid', *names],
                          ([f'{grid}x{grid}', *(_cell(points.get((dtype, stage.index, grid, n)))
                                                for n in names)] for grid in args.grids)), '']
    notes = sorted({(r['name'], r['status']) for r in rows if r['status'] != 'ok'})
    if notes:
        lines += ['## Not measured', ''] + [f'- {n}: {s}' for n, s in notes[:60]] + ['']
    with open(path, 'w') as f:
        f.write('\n'.join(lines))


def write_plot(path_prefix, rows, args) -> list[str]:
    from matplotlib import colormaps
    written = []
    names = args.names
    for dtype in args.dtypes:
        stages = args.stage_list
        panels = ['fwd+bwd ms'] + ([] if args.no_memory else ['peak MB'])  # no memory: no zeros
        fig, axes = new_figure(len(panels), len(stages), squeeze=False,
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
                             color=colormaps['tab20'](names.index(name) % 20), label=name)
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
        written.append(f'{path_prefix}_{dtype}.png')
        fig.savefig(written[-1], dpi=60)
    return written


def main(argv=None) -> int:
    args = parse_args(argv)
    prepare_run(args)
    if args.device == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
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
              ', '.join(f'{k} {format_ratio(v)}' for k, v in r.items() if '/' in k))
    return 3 if interrupted else 0


if __name__ == '__main__':
    from afno_seg.engine import run_tool
    sys.exit(run_tool(main))  # --device cuda without CUDA: one line
