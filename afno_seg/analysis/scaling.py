"""The scaling table: SegFormer B0-B5 x every mixer, params and GFLOPs, on mmseg's own configs.

What ``tools/analysis/mixer_table.py --scaling`` prints (``docs/flops.md``, "Scaling"): mmseg's
``segformer_mit-b{0..5}`` configs at ADE20K 512 x 512 and Cityscapes 1024 x 1024, switched to each
mixer (:mod:`afno_seg.mixer_switch`) and counted by
:func:`~afno_seg.analysis.config_cost.depth_scaled_cost`, beside the SegFormer paper's parameter
counts; and a plot of total GFLOPs against parameters (the axes of the AFNO paper's Fig. 1).
"""
import sys
from pathlib import Path

from ..figures import new_figure
from .report import markdown_table

__all__ = ['PAPER_PARAMS_M', 'SCALING_SETTINGS', 'plot_scaling', 'run_scaling', 'scaling_markdown']

SIZES = ('b0', 'b1', 'b2', 'b3', 'b4', 'b5')
#: (label, mmseg config name pattern, input (H, W)).
SCALING_SETTINGS = (
    ('ADE20K 512x512', 'segformer_mit-{size}_8xb2-160k_ade20k-512x512.py', (512, 512)),
    ('Cityscapes 1024x1024', 'segformer_mit-{size}_8xb1-160k_cityscapes-1024x1024.py',
     (1024, 1024)),
)
#: SegFormer paper (Xie et al. 2021), Table 1: parameters of the ADE20K models (encoder +
#: decoder; the all-MLP decoder is 256 channels wide for B0/B1 and 768 for B2-B5).
PAPER_PARAMS_M = dict(b0=3.8, b1=13.7, b2=27.5, b3=47.3, b4=64.1, b5=84.7)


def run_scaling(mixers: list[str], plot: str | None = None,
                cfg_options: dict | None = None) -> tuple[dict, str]:
    """Trace every (setting, size, mixer); returns ``(payload, markdown)`` and draws ``plot``."""
    from .config_cost import depth_scaled_cost
    from .report import summarize
    records, cache = [], {}
    for label, pattern, shape in SCALING_SETTINGS:
        for size in SIZES:
            config = pattern.format(size=size)
            for mixer in mixers:
                print(f'{label} {size} {mixer} ...', file=sys.stderr, flush=True)
                summary = summarize(depth_scaled_cost(f'mmseg::segformer/{config}', mixer, shape,
                                                      cfg_options, cache))
                records.append(dict(
                    setting=label, config=config, shape=list(shape), size=size, mixer=mixer,
                    **{key: summary[key] for key in ('params_m', 'total_gflops', 'mixer_gflops',
                                                     'mixer_fft_gflops', 'head_gflops',
                                                     'mixer_params_m')}))
    if plot:
        Path(plot).parent.mkdir(parents=True, exist_ok=True)
        plot_scaling(records, plot)
    return dict(records=records, paper_params_m=PAPER_PARAMS_M), scaling_markdown(records)


def scaling_markdown(records: list[dict]) -> str:
    """One table per setting: a row per mixer, a column per size, cells
    ``params M / total GFLOPs / mixer GFLOPs``; then the paper's parameter counts."""
    lines = []
    mixers = list(dict.fromkeys(r['mixer'] for r in records))
    for label in dict.fromkeys(r['setting'] for r in records):
        cells = {(r['mixer'], r['size']): r for r in records if r['setting'] == label}
        sizes = [s for s in SIZES if any(size == s for _, size in cells)]
        rows = [[mixer, *(_cell(cells.get((mixer, s))) for s in sizes)] for mixer in mixers]
        if label.startswith('ADE20K'):
            rows.append(['SegFormer paper, params M', *(f'{PAPER_PARAMS_M[s]:.1f}' for s in sizes)])
        lines += [f'#### {label} (mmseg configs, batch 1): params M / total GFLOPs / mixer GFLOPs',
                  '', *markdown_table(['mixer', *(s.upper() for s in sizes)], rows,
                                      'l' + 'r' * len(sizes)), '']
    return '\n'.join(lines)


def _cell(record: dict | None) -> str:
    if record is None:
        return ''
    return f'{record["params_m"]:.1f} / {record["total_gflops"]:.1f} / {record["mixer_gflops"]:.1f}'


def plot_scaling(records: list[dict], path: str) -> None:
    """Total GFLOPs against params, one line per mixer through B0..B5, a panel per setting."""
    settings = list(dict.fromkeys(r['setting'] for r in records))
    figure, axes = new_figure(1, len(settings), figsize=(6.5 * len(settings), 5), squeeze=False)
    for axis, label in zip(axes[0], settings):
        for mixer in dict.fromkeys(r['mixer'] for r in records):
            points = [r for r in records if r['setting'] == label and r['mixer'] == mixer]
            points.sort(key=lambda r: SIZES.index(r['size']))
            axis.plot([r['params_m'] for r in points], [r['total_gflops'] for r in points],
                      marker='o', markersize=3, label=mixer)
        axis.set(xscale='log', yscale='log', xlabel='parameters (M)',
                 ylabel='total GFLOPs (batch 1)', title=f'SegFormer B0-B5, {label}')
        axis.grid(True, which='both', alpha=0.3)
        axis.legend(fontsize=8)
    figure.savefig(path, dpi=120)
