"""Figures of :mod:`.spectrum_run`'s results (matplotlib, Agg): one run, or several side by side."""
import warnings
from pathlib import Path

import numpy as np

from ..figures import new_figure

__all__ = ['plot_run', 'plot_compare']


def _array(values) -> np.ndarray:
    """A list from the JSON (None for a band without modes) as floats with NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _centres(results: dict) -> np.ndarray:
    edges = np.asarray(results['band_edges'])
    return (edges[:-1] + edges[1:]) / 2


def _stages(results: dict) -> list[int]:
    return sorted({entry['stage'] for entry in results['layers']})


def _erf_image(erf: np.ndarray) -> np.ndarray:
    """ERF normalised to its peak, square-rooted so the tails stay visible."""
    peak = erf.max()
    return np.sqrt(erf / peak) if peak > 0 else erf


def radial_spectra(results: dict, arrays: dict, path: Path, title: str) -> None:
    stages, x = _stages(results), _centres(results)
    fig, axes = new_figure(1, len(stages), figsize=(3.4 * len(stages), 3.2), squeeze=False)
    for ax, stage in zip(axes[0], stages):
        for i, entry in enumerate(e for e in results['layers'] if e['stage'] == stage):
            ax.semilogy(x, _array(entry['energy_out']), '-o', ms=2, color=f'C{i}', lw=1.4,
                        label=f"layer {entry['layer']}")
            ax.semilogy(x, _array(entry['energy_in']), '--', color='k', lw=0.8, alpha=0.6)
        grid = next(e['grid'] for e in results['layers'] if e['stage'] == stage)
        ax.set_title(f'stage {stage} ({grid[0]}x{grid[1]} tokens)', fontsize=9)
        ax.set_xlabel('radial frequency (cycles/token)')
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel('power per mode (black dashed: in; colour: out)')
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)


def afno_sparsity(results: dict, arrays: dict, path: Path, title: str) -> None:
    afno = results['afno']
    x = _centres(results)
    fig, (left, right) = new_figure(1, 2, figsize=(10, 3.6))
    labels = [f"s{e['stage']}.{e['layer']}" for e in afno['layers']]
    left.bar(labels, [100 * e['sparsity'] for e in afno['layers']],
             color=[f"C{e['stage'] - 1}" for e in afno['layers']])
    left.set_ylabel('coefficients zeroed by soft-shrink (%)')
    left.set_xlabel('layer (stage.layer)')
    left.set_ylim(0, 100)
    left.set_title(f"mean {100 * afno['sparsity_mean']:.1f}%, lambda "
                   f"{', '.join(f'{t:g}' for t in afno['thresholds'])}", fontsize=9)
    for stage in sorted({e['stage'] for e in afno['layers']}):
        layers = [e for e in afno['layers'] if e['stage'] == stage]
        with warnings.catch_warnings():  # bands without modes (small grids) stay NaN
            warnings.simplefilter('ignore', RuntimeWarning)
            kept = np.nanmean([_array(e['band_energy_kept']) for e in layers], axis=0)
            zero = np.nanmean([_array(e['band_sparsity']) for e in layers], axis=0)
        right.plot(x, 100 * kept, '-o', ms=3, color=f'C{stage - 1}', label=f'stage {stage} energy')
        right.plot(x, 100 * zero, ':', color=f'C{stage - 1}', label=f'stage {stage} zeroed')
    right.set_xlabel('radial frequency (cycles/token)')
    right.set_ylabel('% per band (solid: energy kept, dotted: zeroed)')
    right.set_ylim(0, 105)
    right.legend(fontsize=6, ncol=2)
    right.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)


def gfn_filter_images(results: dict, arrays: dict, path: Path, title: str) -> None:
    firsts = {}
    for entry in results['gfn']:
        firsts.setdefault(entry['stage'], entry)
    fig, axes = new_figure(len(firsts), 5, figsize=(13, 2.4 * len(firsts)), squeeze=False)
    for row, (stage, entry) in zip(axes, sorted(firsts.items())):
        stored = arrays[f"gfn_stored_{entry['name']}"]
        resampled = arrays[f"gfn_resampled_{entry['name']}"]
        channels = stored.shape[-1]
        panels = [(stored.mean(-1), f'stage {stage} mean |K|, stored {entry["base_grid"]}')]
        panels += [(stored[..., c], f'channel {c}') for c in (0, channels // 2, channels - 1)]
        panels.append((resampled.mean(-1), f'mean |K| resampled {entry["resampled_grid"]}'))
        for ax, (image, label) in zip(row, panels):
            shown = np.fft.fftshift(image, axes=0)  # DC row in the middle, half axis from 0
            ax.imshow(shown, cmap='magma', aspect='auto', origin='lower',
                      extent=(0, 0.5, -0.5, 0.5))
            ax.set_title(label, fontsize=8)
            ax.set_xlabel('f_w (cycles/token)', fontsize=7)
            ax.tick_params(labelsize=6)
        row[0].set_ylabel('f_h (cycles/token)', fontsize=7)
    fig.suptitle(title + ' (first layer of each stage)', fontsize=10)
    fig.savefig(path, dpi=110)


def erf_panels(axes, arrays: dict, results: dict, label: str) -> None:
    for ax, name in zip(axes, ('stage1', 'backbone')):
        ax.imshow(_erf_image(arrays[f'erf_{name}']), cmap='viridis')
        info = results['erf'][name]
        ax.set_title(f"{label}\n{name}: r50 {info['r50']:.0f} px, r90 {info['r90']:.0f} px",
                     fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])


def erf_figure(results: dict, arrays: dict, path: Path, title: str) -> None:
    fig, axes = new_figure(1, 2, figsize=(8, 3))
    erf_panels(axes, arrays, results, title)
    fig.savefig(path, dpi=110)


def plot_run(results: dict, arrays: dict, out_dir: Path, title: str) -> list[Path]:
    """The figures of one run: spectra, AFNO sparsity, GFN filters, ERF (those that apply)."""
    written = []
    for name, key, draw in (('radial_spectra.png', 'layers', radial_spectra),
                            ('afno_sparsity.png', 'afno', afno_sparsity),
                            ('gfn_filters.png', 'gfn', gfn_filter_images),
                            ('erf.png', 'erf', erf_figure)):
        if results.get(key):
            written.append(out_dir / name)
            draw(results, arrays, written[-1], title)
    return written


def plot_compare(runs: list[tuple[str, dict, dict]], out_dir: Path) -> list[Path]:
    """Side by side over runs ``(label, results, arrays)``: ERF heat maps, spectral gain
    (energy out / in per band, mean over each stage's layers) and AFNO sparsity per layer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with_erf = [run for run in runs if run[1].get('erf')]
    if with_erf:
        fig, axes = new_figure(2, len(with_erf), figsize=(2.6 * len(with_erf), 4.4), squeeze=False)
        for column, (label, results, arrays) in enumerate(with_erf):
            erf_panels(axes[:, column], arrays, results, label)
        fig.suptitle('effective receptive field, sqrt(|d out(centre)/d in| / peak); top: stage '
                     '1, bottom: whole backbone', fontsize=9)
        written.append(out_dir / 'erf_compare.png')
        fig.savefig(written[-1], dpi=110)
    stages = sorted({s for _, results, _ in runs for s in _stages(results)})
    fig, axes = new_figure(1, len(stages), figsize=(3.4 * len(stages), 3.4), squeeze=False)
    for ax, stage in zip(axes[0], stages):
        for i, (label, results, _) in enumerate(runs):
            layers = [e for e in results['layers'] if e['stage'] == stage]
            if not layers:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', RuntimeWarning)
                gain = np.nanmean([_array(e['energy_out']) / _array(e['energy_in'])
                                   for e in layers], axis=0)
            ax.semilogy(_centres(results), gain, marker='.', color=f'C{i % 10}',
                        ls='-' if i < 10 else '--', label=label)
        ax.set_title(f'stage {stage}', fontsize=9)
        ax.set_xlabel('radial frequency (cycles/token)')
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel('mixer output / input power')
    axes[0][-1].legend(fontsize=6)
    written.append(out_dir / 'spectral_gain_compare.png')
    fig.savefig(written[-1], dpi=110)
    with_afno = [run for run in runs if run[1].get('afno')]
    if with_afno:
        fig, ax = new_figure(figsize=(7, 3.6))
        for i, (label, results, _) in enumerate(with_afno):
            layers = results['afno']['layers']
            ax.plot(range(len(layers)), [100 * e['sparsity'] for e in layers], '-o', ms=3,
                    color=f'C{i % 10}', label=f"{label} (mean "
                    f"{100 * results['afno']['sparsity_mean']:.0f}%)")
            ax.set_xticks(range(len(layers)), [f"s{e['stage']}.{e['layer']}" for e in layers])
        ax.set_ylabel('coefficients zeroed (%)')
        ax.set_xlabel('layer (stage.layer)')
        ax.set_ylim(0, 100)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        written.append(out_dir / 'afno_sparsity_compare.png')
        fig.savefig(written[-1], dpi=110)
    return written
