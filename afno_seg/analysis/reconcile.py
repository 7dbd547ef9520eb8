"""Analytic B3 mixer GFLOPs under alternative configurations and counting conventions.

Used by ``docs/flops.md`` to reconcile our counts with the AFNO paper's SegFormer-B3 numbers
(Cityscapes, 1024 x 1024: mixer GFLOPs 2.6 for GFN, 23.7 for AFNO-100%). Every variant sums the
mixers' own :meth:`flops` over the stages of a MiT backbone (architecture variants build other
mixers), then optionally rescales one term (convention variants):

* ``fft_scale``: FFT constant relative to ours (2.5 N log2 N per real transform). 0.8 is the
  "butterfly as one complex multiply-add" count (N/2 log2 N butterflies x 8 FLOPs = 4 N log2 N
  per complex FFT, 2 N log2 N per real one), which drops each butterfly's second complex add.
* ``mode_scale``: spectral work on the full ``H x W`` spectrum (as with ``fft2``) instead of the
  ``H x (W/2+1)`` half spectrum of ``rfft2``.
* ``unit``: 'GFLOPs' or 'GMACs' (= GFLOPs / 2).

Run ``python -m afno_seg.analysis.reconcile`` to print the table (Markdown, 1024 x 1024).
"""
from ..backbones.mixer_mit import ARCH_SETTINGS
from ..backbones.stage import build_mixer, stage_arguments, stage_grids
from .report import markdown_table

__all__ = ['PAPER', 'VARIANTS', 'b3_mixer_gflops', 'variant_table']

# AFNO paper (Guibas et al. 2021), SegFormer-B3 on Cityscapes at 1024 x 1024, mixer GFLOPs.
PAPER = {'GFN': 2.6, 'AFNO-100%': 23.7}
MIXERS = {'GFN': dict(type='GlobalFilterMixer'), 'AFNO-100%': dict(type='AFNOMixer', num_blocks=8)}

#: name -> (arch, mixer config overrides, fft_scale, mode_scale, unit)
VARIANTS = {
    'ours: B3, f=1, k=8, rfft2, 5 N log2 N (FLOPs)': ('b3', {}, 1.0, False, 'GFLOPs'),
    'same in GMACs': ('b3', {}, 1.0, False, 'GMACs'),
    'hidden size factor f=2 (or k=4 blocks)': ('b3', dict(hidden_size_factor=2), 1.0, False,
                                               'GFLOPs'),
    'spectral work on the full H x W spectrum': ('b3', {}, 1.0, True, 'GFLOPs'),
    'FFT as butterfly complex MACs (x0.8)': ('b3', {}, 0.8, False, 'GFLOPs'),
    'f=2 and FFT x0.8': ('b3', dict(hidden_size_factor=2), 0.8, False, 'GFLOPs'),
    'full spectrum and FFT x0.8': ('b3', {}, 0.8, True, 'GFLOPs'),
    'B2 blocks [3, 4, 6, 3]': ('b2', {}, 1.0, False, 'GFLOPs'),
    'B4 blocks [3, 8, 27, 3]': ('b4', {}, 1.0, False, 'GFLOPs'),
    'B5 blocks [3, 6, 40, 3]': ('b5', {}, 1.0, False, 'GFLOPs'),
}


def b3_mixer_gflops(mixer_cfg: dict, arch: str = 'b3', image_hw=(1024, 1024),
                    fft_scale: float = 1.0, full_spectrum: bool = False,
                    unit: str = 'GFLOPs') -> dict[str, float]:
    """Analytic mixer cost of a MiT ``arch`` backbone, ``{'fft': .., 'rest': .., 'total': ..}``."""
    sizes = ARCH_SETTINGS[arch]
    totals = {'fft': 0.0, 'rest': 0.0}
    for grid, layers, heads in zip(stage_grids(image_hw), sizes['num_layers'],
                                   sizes['num_heads']):
        channels = sizes['embed_dims'] * heads
        terms = build_mixer(mixer_cfg, **stage_arguments(channels, heads, base_hw_shape=grid)
                            ).flops(grid)
        # Half spectrum H x (W//2+1) -> full H x W for the per-mode terms.
        mode_scale = grid[1] / (grid[1] // 2 + 1) if full_spectrum else 1.0
        for name, value in terms.items():
            if name == 'fft':
                totals['fft'] += layers * fft_scale * value
            else:
                totals['rest'] += layers * mode_scale * value
    divisor = 1e9 * (2 if unit == 'GMACs' else 1)
    out = {k: v / divisor for k, v in totals.items()}
    out['total'] = out['fft'] + out['rest']
    return out


def variant_table(image_hw=(1024, 1024)) -> str:
    rows = []
    for name, (arch, overrides, fft_scale, full, unit) in VARIANTS.items():
        values = {label: b3_mixer_gflops(dict(cfg, **(overrides if 'AFNO' in label else {})),
                                         arch, image_hw, fft_scale, full, unit)['total']
                  for label, cfg in MIXERS.items()}
        rows.append([name, unit, *(f'{v:.2f}' for v in values.values()),
                     f'{values["AFNO-100%"] - values["GFN"]:.2f}'])
    rows.append(['**AFNO paper, Table 4**', '?', *(f'{PAPER[label]:.1f}' for label in MIXERS),
                 f'{PAPER["AFNO-100%"] - PAPER["GFN"]:.1f}'])
    head = ['variant', 'unit', *(f'{name} mixer' for name in MIXERS), 'AFNO - GFN']
    return '\n'.join(markdown_table(head, rows, 'll' + 'r' * (len(MIXERS) + 1))) + '\n'


if __name__ == '__main__':
    print(variant_table())
