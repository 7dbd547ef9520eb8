"""Mixer cost against token count: analytic ``flops()`` next to the traced count, table and plot.

Every listed catalogue variant at SegFormer-B3's stage-1 settings (64 channels, 1 head, reduction 8
for efficient attention, GFN's filter stored at the stage-1 grid of a 1024 crop) on square grids
of 32 x 32 to 512 x 512 tokens, one image. The traced count leaves norms out, as the analytic
counts leave element-wise work out; attention runs the real kernels up to
``real_attention_max_tokens`` tokens and the shape-only stand-in above (same count).
"""
from collections.abc import Sequence

from ..backbones.stage import build_mixer, stage_arguments, stage_grids
from ..figures import new_figure
from ..mixers.catalogue import mixer_catalogue
from .flops import NORM_OPS, count_mixer_flops
from .report import markdown_table

__all__ = ['mixer_sweep', 'plot_sweep', 'stage1_labels', 'sweep_markdown']

DEFAULT_SIZES = (32, 64, 128, 256, 512)


def stage1_labels() -> dict[str, str]:
    """Display label -> catalogue name of every listed variant."""
    return {entry.label: entry.name for entry in mixer_catalogue()}


def mixer_sweep(sizes: Sequence[int] = DEFAULT_SIZES, channels: int = 64,
                labels: Sequence[str] | None = None, count: bool = True,
                real_attention_max_tokens: int = 128 * 128) -> list[dict]:
    """Analytic and traced GFLOPs of each mixer on ``size x size`` grids.

    Returns:
        list[dict]: ``mixer``, ``grid``, ``tokens``, ``analytic_gflops``, ``counted_gflops``
        (None when ``count`` is False) and ``attention`` (how attention products were traced:
        'real', 'stand-in', or None for mixers without attention).
    """
    records, catalogue = [], mixer_catalogue(include_unlisted=True)
    args = stage_arguments(channels, num_heads=1, sr_ratio=8, base_hw_shape=stage_grids(1024)[0])
    for label in labels or stage1_labels():  # a display label or catalogue name
        entry = next(e for e in catalogue if label in (e.label, e.name))
        mixer = build_mixer(entry.config, **args).eval()  # as B3's stage 1 builds it
        for size in sizes:
            grid = (size, size)
            record = dict(mixer=label, grid=list(grid), tokens=size * size,
                          analytic_gflops=sum(mixer.flops(grid).values()) / 1e9,
                          counted_gflops=None, attention=None)
            if count:
                stand_in = size * size > real_attention_max_tokens
                counted = count_mixer_flops(mixer, grid, attention_stand_in=stand_in)
                record['counted_gflops'] = sum(
                    v for op, v in counted.items() if op not in NORM_OPS) / 1e9
                if 'scaled_dot_product_attention' in counted:
                    record['attention'] = 'stand-in' if stand_in else 'real'
            records.append(record)
    return records


def _fmt(value: float | None) -> str:
    if value is None:
        return '-'
    return f'{value:.4g}' if value < 1000 else f'{value:,.0f}'


def _cell(record: dict) -> str:
    return (f'{_fmt(record["analytic_gflops"])} / {_fmt(record["counted_gflops"])}'
            + (' *' if record['attention'] == 'stand-in' else ''))


def sweep_markdown(records: list[dict]) -> str:
    """One row per mixer, one column per grid: ``analytic / counted`` GFLOPs."""
    grids = sorted({r['tokens']: tuple(r['grid']) for r in records}.items())
    cells = {(r['mixer'], r['tokens']): r for r in records}
    rows = ([label, *(_cell(cells[label, tokens]) for tokens, _ in grids)]
            for label in dict.fromkeys(r['mixer'] for r in records))
    head = ['mixer (GFLOPs, analytic / counted)', *(f'{h}x{w} ({n:,})' for n, (h, w) in grids)]
    return '\n'.join(markdown_table(head, rows, 'l' + 'r' * len(grids))) + '\n'


def plot_sweep(records: list[dict], path: str, channels: int = 64) -> None:
    """Log-log plot of mixer GFLOPs against tokens: analytic lines, counted markers."""
    fig, ax = new_figure(figsize=(6.4, 4.4))
    for index, label in enumerate(dict.fromkeys(r['mixer'] for r in records)):
        mine = sorted((r for r in records if r['mixer'] == label), key=lambda r: r['tokens'])
        color, style = f'C{index}', ('-', '--', '-.', ':')[index % 4]
        ax.plot([r['tokens'] for r in mine], [r['analytic_gflops'] for r in mine], style,
                color=color, label=label)
        counted = [r for r in mine if r['counted_gflops'] is not None]
        ax.plot([r['tokens'] for r in counted], [r['counted_gflops'] for r in counted], 'o',
                color=color, markerfacecolor='none', markersize=6)
    ax.set_xscale('log', base=2)
    ax.set(yscale='log', xlabel='tokens N = H x W (square grids, 32x32 to 512x512)',
           ylabel='GFLOPs per image (one mixer call)')
    ax.set_title(f'Token mixers at SegFormer-B3 stage-1 width ({channels} ch): '
                 'lines analytic, circles traced', fontsize=9)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=7, loc='upper left')
    fig.savefig(path, dpi=100)
