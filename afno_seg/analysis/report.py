"""Summaries and Markdown/JSON output of :func:`~afno_seg.analysis.breakdown.analyze_segmentor`."""
import json
from pathlib import Path

__all__ = ['breakdown_markdown', 'markdown_table', 'summarize', 'write_report']

CONVENTION = (
    'GMACs: the count of mmengine\'s FlopAnalyzer (multiply-accumulates; its default estimates '
    'for norms and resizes), with afno_seg\'s handles for FFTs, complex products, baddbmm and '
    'attention returning MAC-equivalents = FLOPs / 2. GFLOPs = 2 x GMACs throughout. FFT of N '
    'points: 5 N log2 N real FLOPs complex, 2.5 N log2 N real-input/real-output (FFTW benchFFT '
    'convention). Element-wise work (activations, softmax, soft-shrink, residual adds) is not '
    'counted. Batch 1. See docs/flops.md.')


def summarize(result: dict) -> dict:
    """Headline numbers: totals, backbone, head and the mixers (all stages), in G and M units."""

    def summed(select, key='flops', unit=1e9):
        return sum(row.get(key, 0.0) for row in result['rows'] if select(row)) / unit

    def is_mixer(row):
        return row['group'].startswith('stage') and row['component'].startswith('mixer')

    return dict(
        params_m=result['total']['params'] / 1e6,
        total_gmacs=result['total']['macs'] / 1e9,
        total_gflops=result['total']['flops'] / 1e9,
        backbone_gflops=summed(lambda r: r['group'].startswith(('stage', 'backbone'))),
        head_gflops=summed(lambda r: r['group'] == 'decode head'),
        mixer_gflops=summed(is_mixer),
        mixer_fft_gflops=summed(lambda r: is_mixer(r) and 'FFT' in r['component']),
        mixer_rest_gflops=summed(lambda r: is_mixer(r) and 'rest' in r['component']),
        mixer_analytic_gflops=summed(is_mixer, 'analytic_flops'),
        mixer_params_m=summed(is_mixer, 'params', 1e6),
    )


def _stage_label(group: str, stages: dict) -> str:
    info = stages.get(group)
    if not info:
        return group
    mixers = ', '.join(f'{n} x {name}' for name, n in info['mixers'].items())
    grid = 'x'.join(str(v) for v in info['grid'])
    return f'{group}: {grid} tokens, {info["channels"]} ch, {mixers}'


def _cells(label: str, component: str, params: float, macs: float, analytic=None,
           ops='') -> list[str]:
    return [label, component, f'{params / 1e6:.3f}', f'{macs / 1e9:.3f}', f'{2 * macs / 1e9:.3f}',
            '' if analytic is None else f'{analytic / 1e9:.3f}', ops]


def markdown_table(head: list[str], rows, align: str = '') -> list[str]:
    """Lines of a Markdown table: the header ``head``, then one line per row of cells; ``align``
    has a letter per column, ``r`` right-aligns it (numbers)."""
    rule = ''.join('---:|' if a == 'r' else '---|' for a in align.ljust(len(head)))
    return ['| ' + ' | '.join(head) + ' |', '|' + rule,
            *('| ' + ' | '.join(map(str, cells)) + ' |' for cells in rows)]


def breakdown_markdown(result: dict, title: str) -> str:
    """The per-stage / head / total table as Markdown, with the convention and the summary."""
    rows = []
    for group in dict.fromkeys(row['group'] for row in result['rows']):
        parts = [row for row in result['rows'] if row['group'] == group]
        label = _stage_label(group, result.get('stages', {}))
        for row in parts:
            rows.append(_cells(label, row['component'], row['params'], row['macs'],
                               row.get('analytic_flops'), ', '.join(row['ops'])))
            label = ''
        if len(parts) > 1:
            rows.append(_cells('', f'**{group} total**', sum(r['params'] for r in parts),
                               sum(r['macs'] for r in parts)))
    rows.append(_cells('**model**', '**total**', result['total']['params'],
                       result['total']['macs']))
    summary = summarize(result)
    lines = [f'### {title}', '', CONVENTION, '', *markdown_table(
        ['part', 'component', 'params (M)', 'GMACs', 'GFLOPs', 'analytic GFLOPs', 'counted ops'],
        rows, 'llrrrr')]
    lines += ['', f'Mixers, all stages: **{summary["mixer_gflops"]:.2f} GFLOPs** '
              f'(FFT {summary["mixer_fft_gflops"]:.2f}, rest {summary["mixer_rest_gflops"]:.2f}; '
              f'analytic {summary["mixer_analytic_gflops"]:.2f}), '
              f'{summary["mixer_params_m"]:.2f} M parameters. '
              f'Total {summary["total_gflops"]:.1f} GFLOPs = {summary["total_gmacs"]:.1f} GMACs, '
              f'{summary["params_m"]:.2f} M parameters.']
    unsupported = ', '.join(f'{op.split("::")[-1]} x{n}'
                            for op, n in result.get('unsupported_ops', {}).items())
    if unsupported:
        lines += ['', f'Ops traced but not counted (element-wise): {unsupported}.']
    return '\n'.join(lines) + '\n'


def write_report(out: str, payload: dict, markdown: str) -> list[str]:
    """Write ``payload`` as JSON and ``markdown`` beside it: ``out`` is a stem or ends in
    ``.json``/``.md``. Returns the paths written."""
    path = Path(out)
    stem = path.with_suffix('') if path.suffix in ('.json', '.md') else path
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix('.json'), stem.with_suffix('.md')
    json_path.write_text(json.dumps(payload, indent=2) + '\n')
    md_path.write_text(markdown)
    return [str(json_path), str(md_path)]
