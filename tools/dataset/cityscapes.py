"""Prepare Cityscapes for mmseg: write ``*_gtFine_labelTrainIds.png`` and the split lists.

Usage::

    python tools/dataset/cityscapes.py data/cityscapes [--nproc 8] [--out-dir DIR]

For each fine annotation under ``gtFine/{train,val,test}/<city>/`` the 19-class training label
map (trainIds, 255 = ignore) is made from the official polygons (``*_gtFine_polygons.json``,
rasterised by cityscapesscripts' ``json2labelImg``, as mmseg's own converter does) or, where only
``*_gtFine_labelIds.png`` exists, by mapping labelIds to trainIds through cityscapesscripts' label
table. ``train.txt`` / ``val.txt`` / ``test.txt`` list the frames (``<city>/<city>_<seq>_<frame>``)
of each split present, like mmseg's converter. Outputs go beside the inputs unless ``--out-dir``
is given (then mirrored under it), so a read-only copy of the data can be prepared elsewhere.
"""
import argparse
import os
import os.path as osp
import sys
from functools import partial

import numpy as np
from PIL import Image

SPLITS = ('train', 'val', 'test')
POLYGONS, LABEL_IDS, TRAIN_IDS = ('_gtFine_polygons.json', '_gtFine_labelIds.png',
                                  '_gtFine_labelTrainIds.png')
EXPECTED_LAYOUT = """expected the Cityscapes layout (from cityscapes-dataset.com:
gtFine_trainvaltest.zip and leftImg8bit_trainvaltest.zip, unzipped into one folder):
  <root>/leftImg8bit/{train,val,test}/<city>/<city>_<seq>_<frame>_leftImg8bit.png
  <root>/gtFine/{train,val,test}/<city>/<city>_<seq>_<frame>_gtFine_polygons.json
                                   (or <city>_<seq>_<frame>_gtFine_labelIds.png)
No real data at hand? `configs/demo/` trains on generated demo data instead."""


def label_ids_to_train_ids_lut() -> np.ndarray:
    """Lookup table (256 entries) labelId -> trainId from cityscapesscripts; ignored -> 255."""
    from cityscapesscripts.helpers.labels import labels
    lut = np.full(256, 255, dtype=np.uint8)
    for label in labels:
        if 0 <= label.id < 256 and 0 <= label.trainId < 255:
            lut[label.id] = label.trainId
    return lut


def find_annotations(gt_dir: str) -> list[tuple[str, str]]:
    """``(frame, source)`` pairs under ``gt_dir``; ``frame`` is ``split/city/<city>_<seq>_<frame>``
    and ``source`` the polygons json if present, else the labelIds png."""
    frames = {}
    for split in SPLITS:
        for dirpath, _, filenames in os.walk(osp.join(gt_dir, split)):
            for name in filenames:
                for suffix in (POLYGONS, LABEL_IDS):
                    if name.endswith(suffix):
                        frame = osp.relpath(osp.join(dirpath, name[:-len(suffix)]), gt_dir)
                        # polygons take precedence: they are the source the labelIds were made from
                        if suffix == POLYGONS or frame not in frames:
                            frames[frame] = osp.join(dirpath, name)
    return sorted(frames.items())


def convert_one(item: tuple[str, str], out_gt_dir: str, lut: np.ndarray) -> str:
    """Write the labelTrainIds png of one frame and return its path."""
    frame, source = item
    target = osp.join(out_gt_dir, frame + TRAIN_IDS)
    os.makedirs(osp.dirname(target), exist_ok=True)
    if source.endswith(POLYGONS):
        from cityscapesscripts.preparation.json2labelImg import json2labelImg
        json2labelImg(source, target, 'trainIds')
    else:
        label_ids = np.asarray(Image.open(source))
        if label_ids.ndim != 2:
            raise ValueError(f'{source}: expected a single-channel labelIds image, '
                             f'got shape {label_ids.shape}')
        Image.fromarray(lut[label_ids]).save(target)
    return target


def check_root(root: str, gt_dir_name: str) -> str:
    gt_dir = osp.join(root, gt_dir_name)
    if not osp.isdir(root):
        raise FileNotFoundError(f'Cityscapes folder {root!r} does not exist; {EXPECTED_LAYOUT}')
    if not any(osp.isdir(osp.join(gt_dir, split)) for split in SPLITS):
        raise FileNotFoundError(f'{root!r} has no {gt_dir_name}/train, /val or /test folder; '
                                f'{EXPECTED_LAYOUT}')
    return gt_dir


def write_split_lists(frames: list[str], out_dir: str) -> dict[str, int]:
    """``<split>.txt`` with one ``<city>/<city>_<seq>_<frame>`` per line, for each split present."""
    counts = {}
    for split in SPLITS:
        names = sorted(f.split(os.sep, 1)[1] for f in frames if f.split(os.sep, 1)[0] == split)
        if names:
            with open(osp.join(out_dir, f'{split}.txt'), 'w') as f:
                f.writelines(name.replace(os.sep, '/') + '\n' for name in names)
            counts[split] = len(names)
    return counts


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Make Cityscapes *_gtFine_labelTrainIds.png and split lists for mmseg.')
    parser.add_argument('cityscapes_path', help='Cityscapes root, e.g. data/cityscapes')
    parser.add_argument('--gt-dir', default='gtFine', help='annotation folder under the root')
    parser.add_argument('-o', '--out-dir', help='output root (default: the Cityscapes root)')
    parser.add_argument('--nproc', default=1, type=int, help='worker processes')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from mmengine.utils import track_parallel_progress, track_progress
    args = parse_args(argv)
    try:
        gt_dir = check_root(args.cityscapes_path, args.gt_dir)
        items = find_annotations(gt_dir)
        if not items:
            raise FileNotFoundError(f'no *{POLYGONS} or *{LABEL_IDS} files under {gt_dir!r}; '
                                    f'{EXPECTED_LAYOUT}')
    except FileNotFoundError as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    out_dir = args.out_dir or args.cityscapes_path
    os.makedirs(out_dir, exist_ok=True)
    sources = sum(src.endswith(POLYGONS) for _, src in items)
    print(f'{len(items)} frames: {sources} from polygons, {len(items) - sources} from labelIds')
    convert = partial(convert_one, out_gt_dir=osp.join(out_dir, args.gt_dir),
                      lut=label_ids_to_train_ids_lut())
    if args.nproc > 1:
        track_parallel_progress(convert, items, args.nproc)
    else:
        track_progress(convert, items)
    counts = write_split_lists([frame for frame, _ in items], out_dir)
    print('\nsplit lists: ' + ', '.join(f'{s}.txt ({n})' for s, n in counts.items())
          + f' in {out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
