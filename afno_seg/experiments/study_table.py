"""The mixer study's results as the AFNO paper's Table 4 (Markdown + CSV) and plots.

One record per row: params and GFLOPs (``get_flops.py``'s ``summary``), mIoU mean +- std over
seeds at every evaluation scale and per-class IoU (``tools/test.py``'s metrics JSON and log),
step time, step memory and inference time as ratios to the ESA row of the same benchmark run, and
AFNO's soft-shrink sparsity (``spectrum.json``) where measured.
"""
import csv
import json
import math
import re
import statistics
from pathlib import Path

from ..analysis.report import markdown_table
from ..figures import new_figure
from . import benchmarking
from .study import cost_files, eval_metrics_file
from .study_plan import Row, Run, cost_config_of

__all__ = ['collect_records', 'per_class_iou', 'table_markdown', 'write_csv', 'write_plots',
           'write_study_outputs']

_CLASS_ROW = re.compile(r'^\|\s*([^|]+?)\s*\|\s*([\d.]+|nan)\s*\|\s*([\d.]+|nan)\s*\|\s*$')


def per_class_iou(metrics_json: Path) -> dict[str, float]:
    """Per-class IoU (%) from the log beside ``tools/test.py``'s metrics JSON (its per-class
    table); empty when the log has none."""
    log = metrics_json.with_suffix('.log')
    if not log.is_file():
        return {}
    values, in_table = {}, False
    for line in log.read_text().splitlines():
        match = _CLASS_ROW.match(line.strip())  # the header row has no numbers: no match
        if 'Class' in line and 'IoU' in line:
            in_table = True
            continue
        if in_table and match:
            values[match.group(1)] = float(match.group(2))
        elif in_table and values and not line.startswith('+'):
            break
    return values


def _mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v == v]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _bench_rows(options) -> dict[str, dict]:
    found = {}
    for path in sorted(cost_files(options)['bench_csv'].parent.glob('models_*.csv')):
        with open(path) as f:
            for row in csv.DictReader(f):
                found[row['config']] = row
    return found


def collect_records(rows: list[Row], runs: list[Run], options) -> list[dict]:
    """One dict per row with everything the table and plots show."""
    bench = _bench_rows(options)
    records = []
    for row in rows:
        record = dict(row=row.row_id, mixer=row.label, config=Path(row.config).name)
        row_runs = [run for run in runs if run.row.row_id == row.row_id]
        record['seeds'] = [run.seed for run in row_runs]
        for scale in options.eval_scales:
            paths = [path for run in row_runs if (path := eval_metrics_file(run.eval_dir(scale)))]
            mious = [float(json.loads(path.read_text())['mIoU']) for path in paths]
            record[f'miou_{scale:g}x'], record[f'miou_{scale:g}x_std'] = _mean_std(mious)
            record[f'miou_{scale:g}x_runs'] = ';'.join(f'{v:.2f}' for v in mious)
            if scale == options.eval_scales[0]:
                record['n_runs'] = len(mious)
                classes = [per_class_iou(path) for path in paths]
                for name in (classes[0] if classes else {}):
                    record[f'iou_{name}'] = _mean_std([c.get(name, math.nan)
                                                       for c in classes])[0]
        flops = options.work_dir / 'costs' / f'flops_{row.row_id}.json'
        if flops.is_file():
            result = json.loads(flops.read_text())
            record.update({key: result['summary'][key]
                           for key in ('params_m', 'mixer_gflops', 'total_gflops')},
                          flops_shape='x'.join(map(str, result['image_hw'])))
        cost_name = Path(cost_config_of(row, options.work_dir, options.cost_config)).name
        measured = bench.get(cost_name, {})
        record.update({key: float(measured.get(key) or 'nan')  # '' or absent: not measured
                       for key in ('train_s', 'step_peak_mb', 'infer_img_s')},
                      bench_status=measured.get('status', ''))
        for run in row_runs[:1]:  # the spectrum is analysed for a row's first seed
            spectrum = run.root / 'spectrum' / 'spectrum.json'
            afno = json.loads(spectrum.read_text()).get('afno') if spectrum.is_file() else None
            if afno:
                record.update(afno_sparsity=afno['sparsity_mean'],
                              afno_lambda=afno['thresholds'][0])
        records.append(record)
    _add_ratios(records)
    return records


def _add_ratios(records: list[dict]) -> None:
    """Step time, peak memory and inference time relative to the ESA row (all stages ESA)."""
    esa = next((r for r in records if r['mixer'] in ('EfficientSelfAttention', 'esa')), {})

    def ratio(a, b):
        return a / b if a == a and b == b and b else math.nan
    for record in records:
        record['step_vs_esa'] = ratio(record['train_s'], esa.get('train_s', math.nan))
        record['memory_vs_esa'] = ratio(record['step_peak_mb'], esa.get('step_peak_mb', math.nan))
        # infer_img_s is a throughput: the time ratio is its inverse
        record['inference_time_vs_esa'] = ratio(esa.get('infer_img_s', math.nan),
                                                record['infer_img_s'])


def _fmt(value, digits: int) -> str:
    return '' if value is None or value != value else f'{value:.{digits}f}'


def table_markdown(records: list[dict], options) -> str:
    """The study table: one row per model, in the paper's Table 4 columns plus ours."""
    scales = options.eval_scales
    head = ['mixer', 'config', 'params (M)', 'mixer GFLOPs', 'total GFLOPs',
            f'mIoU {scales[0]:g}x (mean ± std, n)'] + [f'mIoU {s:g}x' for s in scales[1:]] + [
            'AFNO sparsity', 'step / ESA', 'step memory / ESA', 'inference time / ESA']
    rows = []
    for r in records:
        first = f'miou_{scales[0]:g}x'
        miou = (f"{_fmt(r[first], 2)} ± {_fmt(r[first + '_std'], 2)} ({r['n_runs']})"
                if r.get('n_runs') else '')
        cells = [r['mixer'], r['config'], _fmt(r.get('params_m'), 1),
                 _fmt(r.get('mixer_gflops'), 2), _fmt(r.get('total_gflops'), 1), miou]
        cells += [f"{_fmt(r[f'miou_{s:g}x'], 2)} ± {_fmt(r[f'miou_{s:g}x_std'], 2)}"
                  if r.get(f'miou_{s:g}x') == r.get(f'miou_{s:g}x') else '' for s in scales[1:]]
        cells += [_fmt(r.get('afno_sparsity'), 3), _fmt(r.get('step_vs_esa'), 2),
                  _fmt(r.get('memory_vs_esa'), 2), _fmt(r.get('inference_time_vs_esa'), 2)]
        rows.append(cells)
    return '\n'.join(markdown_table(head, rows)) + '\n'


def write_csv(records: list[dict], path: Path) -> None:
    """Every key of every record, lists joined by ``;``."""
    fields = list(dict.fromkeys(key for record in records for key in record))
    benchmarking.write_csv(path, [{k: ';'.join(map(str, v)) if isinstance(v, list) else v
                                   for k, v in record.items()} for record in records],
                           fields, digits=6)


def _save(fig, ax, path) -> bool:
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120)
    return True


def _scatter(records, x_key, x_label, path, scale_key, log_x=False) -> bool:
    points = [r for r in records if r.get(x_key) == r.get(x_key) and r.get(x_key) is not None
              and r.get(scale_key) == r.get(scale_key)]
    if not points:
        return False
    fig, ax = new_figure(figsize=(6.4, 4.4))
    for r in points:
        ax.errorbar(r[x_key], r[scale_key], yerr=r.get(scale_key + '_std', 0) or 0, fmt='o',
                    capsize=3)
        ax.annotate(r['mixer'], (r[x_key], r[scale_key]), textcoords='offset points',
                    xytext=(4, 4), fontsize=8)
    if log_x:
        ax.set_xscale('log')
    ax.set_xlabel(x_label)
    ax.set_ylabel('mIoU (%), mean ± std over seeds')
    return _save(fig, ax, path)


def _transfer_plot(records, options, path) -> bool:
    scales = sorted(options.eval_scales)
    if len(scales) < 2:
        return False
    fig, ax = new_figure(figsize=(6.4, 4.4))
    for r in records:
        values = [r.get(f'miou_{s:g}x', math.nan) for s in scales]
        errors = [r.get(f'miou_{s:g}x_std', 0) or 0 for s in scales]
        ax.errorbar(scales, values, yerr=errors, marker='o', capsize=2, label=r['mixer'])
    ax.set_xscale('log', base=2)
    ax.set_xticks(scales, [f'{s:g}x' for s in scales])
    ax.set_xlabel('evaluation resolution / training-time val resolution')
    ax.set_ylabel('mIoU (%)')
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, ax, path)


def _sweep_plot(records, options, path) -> bool:
    points = sorted((r for r in records if r.get('afno_lambda') is not None),
                    key=lambda r: r['afno_lambda'])
    if len({r['afno_lambda'] for r in points}) < 2:
        return False
    key = f'miou_{options.eval_scales[0]:g}x'
    lambdas = [r['afno_lambda'] for r in points]
    positions = range(len(points))  # lambda = 0 has no place on a log axis: evenly spaced
    fig, ax = new_figure(figsize=(6.4, 4.4))
    ax.errorbar(positions, [r[key] for r in points], yerr=[r[key + '_std'] or 0 for r in points],
                marker='o', capsize=3, color='C0', label='mIoU')
    ax.set_xticks(list(positions), [f'{v:g}' for v in lambdas])
    ax.set_xlabel('soft-shrink threshold lambda (sparsity_threshold)')
    ax.set_ylabel('mIoU (%)', color='C0')
    twin = ax.twinx()
    twin.plot(positions, [100 * r['afno_sparsity'] for r in points], marker='s', color='C3',
              label='sparsity')
    twin.set_ylabel('spectral coefficients zeroed (%)', color='C3')
    twin.set_ylim(0, 100)
    ax.set_title('AFNO: accuracy and measured sparsity against lambda')
    return _save(fig, ax, path)


def write_plots(records: list[dict], options, out_dir: Path) -> list[Path]:
    """mIoU vs mixer GFLOPs, mIoU vs step time (ratio to ESA), resolution transfer, and the
    sparsity sweep (where the data for each exists)."""
    key = f'miou_{options.eval_scales[0]:g}x'
    plots = [(out_dir / 'miou_vs_mixer_gflops.png',
              lambda p: _scatter(records, 'mixer_gflops', 'mixer GFLOPs (log)', p, key, True)),
             (out_dir / 'miou_vs_step_time.png',
              lambda p: _scatter(records, 'step_vs_esa', 'training step time / ESA', p, key)),
             (out_dir / 'resolution_transfer.png', lambda p: _transfer_plot(records, options, p)),
             (out_dir / 'sparsity_sweep.png', lambda p: _sweep_plot(records, options, p))]
    return [path for path, draw in plots if draw(path)]


def write_study_outputs(rows, runs, options, command: str) -> list[Path]:
    """Collect, then write ``study.md``, ``study.csv`` and the plots into the work dir."""
    records = collect_records(rows, runs, options)
    out = options.work_dir
    csv_path, md_path = out / 'study.csv', out / 'study.md'
    write_csv(records, csv_path)
    shape = next((r['flops_shape'] for r in records if r.get('flops_shape')), None)
    notes = [f'Command: `{command}`', '',
             f'Seeds: {", ".join(map(str, options.seeds))}. mIoU from tools/test.py on the val '
             'split' + (f'; costs at {shape}' if shape else '') +
             (f' on {Path(options.cost_config).name} with each row\'s mixers'
              if options.cost_config else '') +
             '. Ratios to ESA are measured in one interleaved benchmark run.', '']
    md_path.write_text('# Mixer study\n\n' + '\n'.join(notes) + table_markdown(records, options))
    return [md_path, csv_path, *write_plots(records, options, out)]
