"""What a checkpoint's token mixers do in frequency and space: PNGs and one JSON (CPU).

    python tools/analysis/spectrum.py CONFIG CHECKPOINT [IMAGES...] --out-dir DIR
        [--num-images 4] [--size H W] [--bands 16] [--no-erf] [--cfg-options k=v ...]
    python tools/analysis/spectrum.py --compare DIR [DIR ...] --out-dir DIR [--labels ...]

Any checkpoint of the project (demo or B3). Images: the given files, else the first
``--num-images`` of the config's test split, resized as its test pipeline (or ``--size``) and
normalised by the model's preprocessor. Writes ``spectrum.json`` (all numbers), ``arrays.npz``
(ERF maps, GFN ``|K|``) and the figures that apply:

* ``radial_spectra.png``: radial power spectrum of the tokens entering (dashed) and leaving
  (solid) every layer's mixer, per stage;
* ``afno_sparsity.png``: fraction of the spectral coefficients AFNO's soft-shrink zeroes, per
  layer and stage, and the energy kept per radial band;
* ``gfn_filters.png``: GFN's filter magnitude ``|K|`` per stage (channel mean and three channels)
  at its stored grid, and resampled to twice that grid;
* ``erf.png``: effective receptive field (Luo et al. 2016) of stage 1 and of the whole backbone.

``--compare`` draws earlier outputs side by side (``erf_compare.png``,
``spectral_gain_compare.png``, ``afno_sparsity_compare.png``).
"""
import argparse
import json
import sys
from pathlib import Path

from mmengine.config import DictAction

from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP, trusted_checkpoints


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', nargs='?')
    parser.add_argument('checkpoint', nargs='?')
    parser.add_argument('images', nargs='*', help='image files (default: the test split)')
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--num-images', type=int, default=4)
    parser.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'),
                        help='resize every image to H x W instead of the test pipeline\'s resize')
    parser.add_argument('--bands', type=int, default=16, help='radial frequency bands')
    parser.add_argument('--resample-factor', type=float, default=2.0,
                        help='GFN filters are also shown resampled to this factor of their grid')
    parser.add_argument('--no-erf', action='store_true', help='skip the receptive fields')
    parser.add_argument('--title', help='figure title (default: the config name)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--compare', nargs='+', metavar='DIR',
                        help='draw earlier outputs side by side instead')
    parser.add_argument('--labels', nargs='+', help='--compare: one label per DIR')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    args = parser.parse_args(argv)
    if not args.compare and not (args.config and args.checkpoint):
        parser.error('give CONFIG CHECKPOINT, or --compare DIR ...')
    return args


def compare(args) -> None:
    import numpy as np

    from afno_seg.experiments.spectrum_plots import plot_compare
    labels = args.labels or [Path(d).name for d in args.compare]
    if len(labels) != len(args.compare):
        raise UserError(f'--labels gives {len(labels)} labels for {len(args.compare)} '
                        'directories')
    runs = []
    for label, directory in zip(labels, args.compare):
        path = Path(directory) / 'spectrum.json'
        if not path.is_file():
            raise UserError(f'{path} not found: run tools/analysis/spectrum.py CONFIG CHECKPOINT '
                            f'--out-dir {directory} first')
        arrays = dict(np.load(Path(directory) / 'arrays.npz'))
        runs.append((label, json.loads(path.read_text()), arrays))
    for path in plot_compare(runs, Path(args.out_dir)):
        print(f'wrote {path}')


def main(argv=None) -> None:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)
    if args.compare:
        compare(args)
        return
    from afno_seg.experiments.spectrum_run import run_spectrum
    with trusted_checkpoints(args.trust_checkpoint):
        results, written = run_spectrum(
            args.config, args.checkpoint, args.out_dir, args.images, args.num_images, args.size,
            args.bands, args.resample_factor, not args.no_erf, args.title, args.cfg_options)
    if results.get('afno'):
        afno = results['afno']
        print(f"AFNO soft-shrink sparsity: mean {afno['sparsity_mean']:.4f}; per stage "
              + ', '.join(f'{k}: {v:.4f}' for k, v in afno['sparsity_per_stage'].items()))
    if results.get('erf'):
        print('ERF radius holding 50% / 90% of the gradient mass: ' + '; '.join(
            f"{k} {v['r50']:.1f} / {v['r90']:.1f} px" for k, v in results['erf'].items()))
    for path in written:
        print(f'wrote {path}')


if __name__ == '__main__':
    sys.exit(run_tool(main))
