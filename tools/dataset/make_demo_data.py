"""Generate a small procedural street-scene dataset in the Cityscapes (or ADE20K) layout.

The demo configs (``configs/demo/``) train a tiny SegFormer on a CPU in minutes, with no download.
This script writes what mmseg's ``CityscapesDataset`` reads::

    OUT_DIR/leftImg8bit/{train,val}/<city>/<city>_<seq>_<frame>_leftImg8bit.png       RGB uint8
    OUT_DIR/gtFine/{train,val}/<city>/<city>_<seq>_<frame>_gtFine_labelTrainIds.png   uint8
    OUT_DIR/demo_meta.json                                                             parameters

Labels are the 19 Cityscapes train ids (0 road ... 18 bicycle) and 255 = ignore (the ego-vehicle
hood, as in Cityscapes). Each scene is a pinhole-camera view down a street: a road converging to the
vanishing point with lane markings, kerbs and sidewalks, facades with windows and side walls, trees,
hedges, walls and fences in the gaps, poles carrying street lights, signs and traffic lights, parked
and moving cars (sometimes a bus or truck), pedestrians and a sky. Every object is a planar polygon
in world coordinates projected by ``x = cx + f X / Z``, ``y = horizon + f (h_cam - Y) / Z`` and
painted back to front, so occlusion and perspective are right by construction.

No class can be told by pixel colour alone: cars, buildings, sidewalks, poles and the road all draw
from overlapping grey palettes; cast shadows darken road and sidewalk; reflective windows and
overcast skies share colours; and per-image exposure, colour cast, haze, blur and sensor noise shift
everything. Shape, context and texture are what a segmenter has to learn;
``tests/test_demo_data.py`` measures how far the best colour-to-class lookup gets.

Defaults: 64 train and 16 val images of 256 x 512 (H x W, Cityscapes' 1:2 aspect at 1/4 of its
1024 x 2048) -- enough variety for a tiny model to reach a clearly non-trivial mIoU in a few CPU
minutes, while the whole set is written in about 5 s of one CPU core (21 MB of PNG). Output is
byte-identical for a given seed: image ``i`` of a split is drawn from
``numpy.random.default_rng([seed, split, i])``, so it does not depend on the other split's size.

``--layout ade20k`` writes the same scenes as mmseg's ``ADE20KDataset`` reads them
(``images/{training,validation}/*.jpg``, ``annotations/{training,validation}/*.png``, 150 classes,
0 = other, loaded with ``reduce_zero_label=True``; :mod:`afno_seg.datasets.demo_dataset`), for
mmseg's ADE20K configs with ``--cfg-options train_dataloader.dataset.data_root=OUT_DIR ...``.

Usage::

    python tools/dataset/make_demo_data.py [OUT_DIR] [--layout cityscapes|ade20k]
        [--num-train N] [--num-val M] [--height H] [--width W] [--seed S] [--force]

or from Python: ``generate(out_dir, num_train, num_val, height, width, seed, layout=...)``.
"""
import argparse
import sys

from afno_seg.datasets.demo_dataset import CLASSES, DEFAULT_OUT, IGNORE, generate  # noqa: F401


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out_dir', nargs='?',
                        help=f'dataset root (default: {DEFAULT_OUT}, or data/demo_ade20k '
                        'beside it for --layout ade20k)')
    parser.add_argument('--layout', choices=['cityscapes', 'ade20k'], default='cityscapes',
                        help="folder layout and labels: Cityscapes' 19 train ids, or ADE20K's "
                        '150 classes (default: cityscapes)')
    parser.add_argument('--num-train', type=int, default=64)
    parser.add_argument('--num-val', type=int, default=16)
    parser.add_argument('--height', type=int, default=256)
    parser.add_argument('--width', type=int, default=512)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--force', action='store_true', help='regenerate an existing demo dataset')
    args = parser.parse_args(argv)
    out_dir = args.out_dir or str(DEFAULT_OUT.parent / f'demo_{args.layout}')
    try:
        generate(out_dir, args.num_train, args.num_val, args.height, args.width, args.seed,
                 args.force, layout=args.layout)
    except (FileExistsError, ValueError) as err:
        parser.exit(2, f'error: {err}\n')


if __name__ == '__main__':
    sys.exit(main())
