"""The scaling table: SegFormer B0-B5 x every mixer, params and GFLOPs, on mmseg's own configs.

What ``tools/analysis/mixer_table.py --scaling`` prints (``docs/flops.md``, section "Scaling"):
for mmseg's ``segformer_mit-b{0..5}`` configs at ADE20K 512 x 512 and Cityscapes 1024 x 1024
(the files inside the installed wheel, converted by ``--mixer``,
:mod:`afno_seg.mixer_switch`), each listed mixer's parameters, mixer GFLOPs (FFT included) and
total GFLOPs, counted by :func:`~afno_seg.analysis.config_cost.depth_scaled_cost` (the FLOP
convention of :mod:`.flops`), beside the SegFormer paper's parameter counts; and one plot of
total GFLOPs against parameters per mixer (the axes of the AFNO paper's Fig. 1).
"""
import importlib.util
import sys
from pathlib import Path

__all__ = ['PAPER_PARAMS_M', 'SCALING_SETTINGS', 'mmseg_segformer_config', 'plot_scaling',
           'run_scaling', 'scaling_markdown']

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


def mmseg_segformer_config(name: str) -> str:
    """The path of ``segformer/<name>`` inside the installed mmseg wheel."""
    root = Path(list(importlib.util.find_spec('mmseg').submodule_search_locations)[0])
    return str(root / '.mim' / 'configs' / 'segformer' / name)


def run_scaling(mixers: list[str], plot: str | None = None,
                cfg_options: dict | None = None) -> tuple[dict, str]:
    """Trace every (setting, size, mixer); returns ``(payload, markdown)`` and draws ``plot``."""
    from .config_cost import depth_scaled_cost
    from .report import summarize
    records, cache = [], {}
    for label, pattern, shape in SCALING_SETTINGS:
        for size in SIZES:
            config = mmseg_segformer_config(pattern.format(size=size))
            for mixer in mixers:
                print(f'{label} {size} {mixer} ...', file=sys.stderr, flush=True)
                result = depth_scaled_cost(config, mixer, shape, cfg_options, cache)
                summary = summarize(result)
                records.append(dict(
                    setting=label, config=Path(config).name, shape=list(shape), size=size,
                    mixer=mixer, params_m=summary['params_m'],
                    total_gflops=summary['total_gflops'], mixer_gflops=summary['mixer_gflops'],
                    mixer_fft_gflops=summary['mixer_fft_gflops'],
                    head_gflops=summary['head_gflops'],
                    mixer_params_m=summary['mixer_params_m']))
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
        lines += [f'#### {label} (mmseg configs, batch 1): params M / total GFLOPs / mixer GFLOPs',
                  '', '| mixer | ' + ' | '.join(s.upper() for s in sizes) + ' |',
                  '| --- |' + ' ---: |' * len(sizes)]
        for mixer in mixers:
            row = [cells.get((mixer, s)) for s in sizes]
            lines.append(f'| {mixer} | ' + ' | '.join(
                '' if r is None else f'{r["params_m"]:.1f} / {r["total_gflops"]:.1f} / '
                f'{r["mixer_gflops"]:.1f}' for r in row) + ' |')
        if label.startswith('ADE20K'):
            lines.append('| SegFormer paper, params M | ' + ' | '.join(
                f'{PAPER_PARAMS_M[s]:.1f}' for s in sizes) + ' |')
        lines.append('')
    return '\n'.join(lines)


def plot_scaling(records: list[dict], path: str) -> None:
    """Total GFLOPs against params, one line per mixer through B0..B5, a panel per setting."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    settings = list(dict.fromkeys(r['setting'] for r in records))
    figure, axes = plt.subplots(1, len(settings), figsize=(6.5 * len(settings), 5), squeeze=False)
    for axis, label in zip(axes[0], settings):
        for mixer in dict.fromkeys(r['mixer'] for r in records):
            points = [r for r in records if r['setting'] == label and r['mixer'] == mixer]
            points.sort(key=lambda r: SIZES.index(r['size']))
            axis.plot([r['params_m'] for r in points], [r['total_gflops'] for r in points],
                      marker='o', markersize=3, label=mixer)
        axis.set_xscale('log')
        axis.set_yscale('log')
        axis.set_xlabel('parameters (M)')
        axis.set_ylabel('total GFLOPs (batch 1)')
        axis.set_title(f'SegFormer B0-B5, {label}')
        axis.grid(True, which='both', alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
