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

from afno_seg.experiments.benchmarking import (
    DTYPES,
    load_average,
    prepare_run,
    write_csv,
)
from afno_seg.experiments.mixer_benchmark import (
    B3_STAGES,
    REFERENCE_NAMES,
    Stage,
    default_mixers,
    mixer_names,
    run_sweep,
)
from afno_seg.experiments.mixer_benchmark_report import (
    FIELDS,
    exponent_rows,
    format_ratio,
    ratio_rows,
    write_markdown,
    write_plot,
)

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


def main(argv=None) -> int:
    args = parse_args(argv)
    if not prepare_run(args):
        return 1
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
    sys.exit(main())
