"""The mixer study's results as the AFNO paper's Table 4 (Markdown + CSV) and plots.

One record per row: params and GFLOPs (``get_flops.py``'s ``summary``), mIoU mean +- std over
seeds at every evaluation scale and per-class IoU (``tools/test.py``'s metrics JSON and log),
step time, step memory and inference time as ratios to the ESA row of the same benchmark run,
AFNO's soft-shrink sparsity (``spectrum.json``) where measured, and the seed-noise verdict of the
headline mIoU against ESA's (:mod:`.study_verdict`). A row without runs here takes its per-seed
mIoU, per-class IoU, sparsity, FLOPs and benchmark ratios from an earlier ``study.csv``
(``earlier_csv``), each one only where not measured here; the row is marked and ``from_earlier``
lists what was read.
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
from .study_verdict import paired_difference, verdict

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


def _earlier_rows(options) -> dict[str, dict]:
    if not getattr(options, 'earlier_csv', None):
        return {}
    with open(options.earlier_csv) as f:
        return {r['row']: r for r in csv.DictReader(f)}


def _earlier_by_seed(earlier: dict, scale: float) -> dict[int, float]:
    """Per-seed mIoU of an earlier study.csv row: its ``seeds`` and ``miou_<s>x_runs`` (seed
    order) when they pair one to one, else nothing."""
    seeds = [int(s) for s in earlier.get('seeds', '').split(';') if s]
    values = [float(v) for v in earlier.get(f'miou_{scale:g}x_runs', '').split(';') if v]
    return dict(zip(seeds, values)) if len(seeds) == len(values) else {}


def collect_records(rows: list[Row], runs: list[Run], options) -> list[dict]:
    """One dict per row with everything the table and plots show; per-seed mIoU at the headline
    scale under ``_by_seed`` (not written to the CSV)."""
    bench, earlier_rows = _bench_rows(options), _earlier_rows(options)
    records = []
    for row in rows:
        record = dict(row=row.row_id, mixer=row.label, config=Path(row.config).name)
        row_runs = [run for run in runs if run.row.row_id == row.row_id]
        record['seeds'] = [run.seed for run in row_runs]
        earlier = earlier_rows.get(row.row_id, {})
        for scale in options.eval_scales:
            paths = {run.seed: path for run in row_runs
                     if (path := eval_metrics_file(run.eval_dir(scale)))}
            carried = {seed: value for seed, value in _earlier_by_seed(earlier, scale).items()
                       if seed in options.seeds and seed not in paths}  # seeds not run here
            by_seed = dict(sorted({**carried, **{seed: float(json.loads(path.read_text())['mIoU'])
                                                 for seed, path in paths.items()}}.items()))
            if carried:
                record.setdefault('from_earlier', []).append(
                    f'mIoU {scale:g}x seeds {" ".join(map(str, sorted(carried)))}')
            mious = list(by_seed.values())
            record[f'miou_{scale:g}x'], record[f'miou_{scale:g}x_std'] = _mean_std(mious)
            record[f'miou_{scale:g}x_runs'] = ';'.join(f'{v:.2f}' for v in mious)
            if scale == options.eval_scales[0]:
                record['n_runs'], record['_by_seed'] = len(mious), by_seed
                record['seeds'] = list(by_seed) or record['seeds']  # the ones measured
                classes = [per_class_iou(path) for path in paths.values()]
                for name in (classes[0] if classes and not carried else {}):
                    record[f'iou_{name}'] = _mean_std([c.get(name, math.nan)
                                                       for c in classes])[0]
                if carried:  # per-class IoU over the earlier study's seeds
                    record.update({key: float(value) for key, value in earlier.items()
                                   if key.startswith('iou_') and value})
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
    for record in records:
        _carry_earlier(record, earlier_rows.get(record['row'], {}))
    _add_verdicts(records)
    return records


_CARRIED = ('params_m', 'mixer_gflops', 'total_gflops', 'flops_shape', 'afno_sparsity',
            'afno_lambda', 'step_vs_esa', 'memory_vs_esa', 'inference_time_vs_esa')


def _carry_earlier(record: dict, earlier: dict) -> None:
    """The columns of :data:`_CARRIED` not measured here, from the earlier CSV's row."""
    def measured(value) -> bool:
        return value not in (None, '') and value == value  # nan is not

    taken = [key for key in _CARRIED if measured(earlier.get(key)) and earlier[key] != 'nan'
             and not measured(record.get(key))]
    for key in taken:
        record[key] = earlier[key] if key == 'flops_shape' else float(earlier[key])
    if taken or record.get('from_earlier'):
        record['from_earlier'] = ';'.join(record.get('from_earlier', []) + taken)


def _is_esa(record: dict) -> bool:
    return record['mixer'] in ('EfficientSelfAttention', 'esa')


def _add_verdicts(records: list[dict]) -> None:
    """Headline mIoU minus ESA's, seeds paired: mean, 95% paired t interval, verdict."""
    esa = next((r for r in records if _is_esa(r)), None)
    for record in records:
        if esa is None or record is esa:
            record['verdict'] = 'reference' if record is esa else ''
            continue
        difference = paired_difference(record['_by_seed'], esa['_by_seed'])
        record.update(delta_vs_esa=difference.mean, delta_low=difference.low,
                      delta_high=difference.high, pairs_with_esa=difference.pairs,
                      verdict=verdict(difference))


def _add_ratios(records: list[dict]) -> None:
    """Step time, peak memory and inference time relative to the ESA row (all stages ESA)."""
    esa = next((r for r in records if _is_esa(r)), {})

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
    """The study table: one row per model, in the paper's Table 4 columns plus ours (columns
    without a value in any row left out: e.g. the costs of a --no-costs study)."""
    scales = options.eval_scales
    head = ['mixer', 'config', 'params (M)', 'mixer GFLOPs', 'total GFLOPs',
            f'mIoU {scales[0]:g}x (mean ± std, n)', f'Δ {scales[0]:g}x vs ESA [95% interval]',
            'verdict'] + [f'mIoU {s:g}x' for s in scales[1:]] + [
            'AFNO sparsity', 'step / ESA', 'step memory / ESA', 'inference time / ESA']
    rows = []
    for r in records:
        first = f'miou_{scales[0]:g}x'
        miou = (f"{_fmt(r[first], 2)} ± {_fmt(r[first + '_std'], 2)} ({r['n_runs']})"
                if r.get('n_runs') else '')
        delta = _fmt(r.get('delta_vs_esa'), 2)
        if delta and r.get('delta_low') == r.get('delta_low'):
            delta += f" [{_fmt(r['delta_low'], 2)}, {_fmt(r['delta_high'], 2)}]"
        cells = [r['mixer'] + ('†' if r.get('from_earlier') else ''), r['config'],
                 _fmt(r.get('params_m'), 1), _fmt(r.get('mixer_gflops'), 2),
                 _fmt(r.get('total_gflops'), 1), miou, delta, r.get('verdict', '')]
        cells += [f"{_fmt(r[f'miou_{s:g}x'], 2)} ± {_fmt(r[f'miou_{s:g}x_std'], 2)}"
                  if r.get(f'miou_{s:g}x') == r.get(f'miou_{s:g}x') else '' for s in scales[1:]]
        cells += [_fmt(r.get('afno_sparsity'), 3), _fmt(r.get('step_vs_esa'), 2),
                  _fmt(r.get('memory_vs_esa'), 2), _fmt(r.get('inference_time_vs_esa'), 2)]
        rows.append(cells)
    kept = [i for i in range(len(head)) if i < 2 or any(cells[i] for cells in rows)]  # measured
    return '\n'.join(markdown_table([head[i] for i in kept],
                                    [[cells[i] for i in kept] for cells in rows])) + '\n'


def write_csv(records: list[dict], path: Path) -> None:
    """Every key of every record, lists joined by ``;``."""
    fields = list(dict.fromkeys(key for record in records for key in record
                                if not key.startswith('_')))
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


def _delta_plot(records, options, path) -> bool:
    points = [r for r in records if r.get('delta_low', math.nan) == r.get('delta_low')]
    if not points:
        return False
    fig, ax = new_figure(figsize=(6.4, 0.9 + 0.32 * len(points)))
    for y, r in enumerate(points):
        colour = {'above': 'C2', 'below': 'C3'}.get(r['verdict'].split()[0], 'C7')
        ax.errorbar(r['delta_vs_esa'], y, xerr=[[r['delta_vs_esa'] - r['delta_low']],
                                                 [r['delta_high'] - r['delta_vs_esa']]],
                    fmt='o', capsize=3, color=colour)
    ax.axvline(0, color='k', lw=0.8)
    ax.set_yticks(range(len(points)), [r['mixer'] for r in points])
    ax.invert_yaxis()
    ax.set_xlabel(f'mIoU {options.eval_scales[0]:g}x minus ESA\'s, seeds paired: mean and 95% '
                  'paired t interval')
    return _save(fig, ax, path)


def write_plots(records: list[dict], options, out_dir: Path) -> list[Path]:
    """mIoU vs mixer GFLOPs, mIoU vs step time (ratio to ESA), resolution transfer, the
    sparsity sweep and the paired differences to ESA (where the data for each exists)."""
    key = f'miou_{options.eval_scales[0]:g}x'
    plots = [(out_dir / 'miou_vs_mixer_gflops.png',
              lambda p: _scatter(records, 'mixer_gflops', 'mixer GFLOPs (log)', p, key, True)),
             (out_dir / 'miou_vs_step_time.png',
              lambda p: _scatter(records, 'step_vs_esa', 'training step time / ESA', p, key)),
             (out_dir / 'resolution_transfer.png', lambda p: _transfer_plot(records, options, p)),
             (out_dir / 'sparsity_sweep.png', lambda p: _sweep_plot(records, options, p)),
             (out_dir / 'delta_vs_esa.png', lambda p: _delta_plot(records, options, p))]
    return [path for path, draw in plots if draw(path)]


def _source_note(source: Run | None, options) -> str:
    if source is not None:
        path = eval_metrics_file(source.eval_dir(options.eval_scales[0]))
        miou = f"{json.loads(path.read_text())['mIoU']:.2f}" if path else 'not evaluated'
        start = (f'the source {source.row.label.split()[0]} ({Path(source.row.config).name}, '
                 f'seed {source.seed}, trained with --source-cfg-options added; mIoU {miou} at '
                 f'{options.eval_scales[0]:g}x)')
    else:
        start = f'`{options.load_from}`'
    return (f'Transplant: every run starts from {start} by load_from; the tensors of its mixers '
            'that the checkpoint lacks start as initialised, all runs get the same fine-tune '
            '(--cfg-options); ESA fine-tuned alike is the control row.')


def write_study_outputs(rows, runs, options, command: str, source: Run | None = None
                        ) -> list[Path]:
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
             '. Ratios to ESA are measured in one interleaved benchmark run.', '',
             'Δ vs ESA: the mean over seeds of (row − ESA) at the same seed number (same data '
             'order), with its two-sided 95% paired t interval (mean ± t(0.975, n−1) · std / √n '
             'over the n paired seeds); verdict "above ESA" / "below ESA" where the interval '
             'excludes 0, else "within seed noise".', '']
    if any(r.get('from_earlier') for r in records):
        notes += ['† the columns this study did not measure for the row (of per-seed mIoU and '
                  'per-class IoU, AFNO sparsity, FLOPs, benchmark ratios; the CSV\'s '
                  f'from_earlier lists them) are read from `{options.earlier_csv}`.', '']
    if source is not None or options.load_from:
        notes += [_source_note(source, options), '']
    md_path.write_text('# Mixer study\n\n' + '\n'.join(notes) + '\n' +
                       table_markdown(records, options))
    return [md_path, csv_path, *write_plots(records, options, out)]
