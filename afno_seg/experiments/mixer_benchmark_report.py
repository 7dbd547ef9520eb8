"""Reports of the mixer benchmark: the CSV fields, paired ratios at the B3 stage points, scaling
exponents, the Markdown page and the plots (``tools/analysis/benchmark_mixers.py``)."""
import math

import torch

from ..analysis.report import markdown_table
from .benchmarking import environment, fit_exponent, paired_ratio
from .figures import pyplot, save_figure
from .mixer_benchmark import COMPOSED, REFERENCE_NAMES, attention_names, spectral_names

__all__ = ['FIELDS', 'exponent_rows', 'format_ratio', 'ratio_rows', 'write_markdown', 'write_plot']

FIELDS = ['device', 'dtype', 'stage', 'channels', 'grid', 'tokens', 'batch', 'name', 'status',
          'median_ms', 'min_ms', 'max_ms', 'peak_mb', 'held_mb', 'gflop_fwd', 'times_ms']


def _by_point(rows: list[dict]) -> dict[tuple, dict]:
    """``(dtype, stage, grid, name) -> row``: the first row of each point."""
    points = {}
    for row in rows:
        points.setdefault((row['dtype'], row['stage'], row['grid'], row['name']), row)
    return points


def ratio_rows(rows: list[dict], stages, dtypes, grid_of) -> list[dict]:
    """Per dtype and stage (at ``grid_of(stage)``): the paired ratios the targets are about."""
    points, out = _by_point(rows), []
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
                                   f'{int(math.isqrt(points[0][0]))}-'
                                   f'{int(math.isqrt(points[-1][0]))}')
            out.append(entry)
    return out


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
    points = _by_point(rows)
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
    plt = pyplot()
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
        written.append(f'{path_prefix}_{dtype}.png')
        save_figure(fig, written[-1], dpi=60)
    return written
