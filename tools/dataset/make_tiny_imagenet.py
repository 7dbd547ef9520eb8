"""Generate a tiny procedural image-classification set in the ImageNet folder layout.

There is no ImageNet here; this set lets the classification configs (``configs/mmpretrain/``) and
the pretrain -> segment hand-off run end to end on a CPU. It writes what mmpretrain's ``ImageNet``
and ``CustomDataset`` read::

    OUT_DIR/train/<class>/<class>_<i>.JPEG     RGB, SIZE x SIZE
    OUT_DIR/val/<class>/<class>_<i>.JPEG
    OUT_DIR/meta/train.txt, meta/val.txt       '<class>/<file> <label>' lines (ImageNet's meta/)
    OUT_DIR/meta/classes.txt                   one class name a line, in label order
    OUT_DIR/tiny_imagenet_meta.json            parameters

Classes differ only by spatial structure, never by colour: every image draws its two colours,
contrast, pattern scale, phase and position at random, adds pixel noise and is JPEG-compressed.

- ``checkerboard``: a checkerboard of random cell size and offset;
- ``disk``: one filled disk of random centre and radius on a plain background;
- ``horizontal_stripes`` / ``vertical_stripes``: square-wave stripes of random period and phase
  (a horizontal flip, the usual augmentation, keeps each class what it is).

A model must look at the layout of pixels, which a token mixer over a grid can; a colour
histogram cannot (``tests/test_mmpretrain.py`` checks that per-image colour statistics carry no
label). Output is byte-identical for a given seed: image ``i`` of class ``c`` of a split is drawn
from ``numpy.random.default_rng([seed, split, c, i])``.

Usage::

    python tools/dataset/make_tiny_imagenet.py [OUT_DIR] [--num-train N] [--num-val M]
        [--size S] [--seed S] [--force]

(N and M per class) or from Python: ``generate(out_dir, num_train, num_val, size, seed)``.
"""
import argparse
import json
import os
import shutil
import sys

import cv2
import numpy as np

CLASSES = ('checkerboard', 'disk', 'horizontal_stripes', 'vertical_stripes')
SPLITS = ('train', 'val')
META_NAME = 'tiny_imagenet_meta.json'
JPEG_QUALITY = 90


def _colours(rng) -> tuple[np.ndarray, np.ndarray]:
    """Two random RGB colours at least 60 apart in mean intensity (so the pattern is visible)."""
    while True:
        first, second = rng.uniform(0, 255, size=(2, 3))
        if abs(first.mean() - second.mean()) >= 60:
            return first, second


def _mask(rng, name: str, size: int) -> np.ndarray:
    """Boolean ``size x size`` foreground mask of one random instance of class ``name``."""
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float64)
    if name == 'checkerboard':
        cell = rng.uniform(size / 10, size / 4)
        off_r, off_c = rng.uniform(0, 2 * cell, size=2)
        return (np.floor((rows + off_r) / cell) + np.floor((cols + off_c) / cell)) % 2 == 1
    if name == 'disk':
        radius = rng.uniform(size / 6, size / 3)
        centre = rng.uniform(radius, size - radius, size=2)
        return (rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius ** 2
    if name in ('horizontal_stripes', 'vertical_stripes'):
        period = rng.uniform(size / 8, size / 3)
        phase = rng.uniform(0, period)
        axis = rows if name == 'horizontal_stripes' else cols
        return ((axis + phase) % period) < period / 2
    raise ValueError(f'unknown class {name!r}')


def render(rng, name: str, size: int) -> np.ndarray:
    """One ``size x size x 3`` uint8 RGB image of class ``name``."""
    foreground, background = _colours(rng)
    image = np.where(_mask(rng, name, size)[..., None], foreground, background)
    image = image + rng.normal(0, 12, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def generate(out_dir: str, num_train: int = 40, num_val: int = 10, size: int = 64,
             seed: int = 0) -> dict:
    """Write the set under ``out_dir`` (see module docstring) and return its parameters.

    Args:
        out_dir (str): Output folder (created).
        num_train (int): Training images per class. Default: 40.
        num_val (int): Validation images per class. Default: 10.
        size (int): Image side in pixels. Default: 64.
        seed (int): Random seed. Default: 0.
    """
    if min(num_train, num_val) < 1 or size < 16:
        raise ValueError('need at least one image per class and split, and size >= 16')
    counts = dict(train=num_train, val=num_val)
    os.makedirs(os.path.join(out_dir, 'meta'), exist_ok=True)
    for split_index, split in enumerate(SPLITS):
        lines = []
        for label, name in enumerate(CLASSES):
            folder = os.path.join(out_dir, split, name)
            os.makedirs(folder, exist_ok=True)
            for i in range(counts[split]):
                rng = np.random.default_rng([seed, split_index, label, i])
                file_name = f'{name}_{i:05d}.JPEG'
                rgb = render(rng, name, size)
                ok = cv2.imwrite(os.path.join(folder, file_name), rgb[..., ::-1],
                                 [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
                if not ok:
                    raise OSError(f'could not write {os.path.join(folder, file_name)}')
                lines.append(f'{name}/{file_name} {label}\n')
        with open(os.path.join(out_dir, 'meta', f'{split}.txt'), 'w') as f:
            f.writelines(lines)
    with open(os.path.join(out_dir, 'meta', 'classes.txt'), 'w') as f:
        f.writelines(f'{name}\n' for name in CLASSES)
    meta = dict(generator='tools/dataset/make_tiny_imagenet.py', classes=list(CLASSES),
                num_train=num_train, num_val=num_val, size=size, seed=seed)
    with open(os.path.join(out_dir, META_NAME), 'w') as f:
        json.dump(meta, f, indent=1)
    return meta


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out_dir', nargs='?', default='data/tiny_imagenet')
    parser.add_argument('--num-train', type=int, default=40, help='train images per class')
    parser.add_argument('--num-val', type=int, default=10, help='val images per class')
    parser.add_argument('--size', type=int, default=64, help='image side in pixels')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--force', action='store_true', help='replace an existing OUT_DIR')
    args = parser.parse_args(argv)
    if os.path.exists(args.out_dir):
        if not args.force:
            print(f'{args.out_dir} exists; pass --force to replace it', file=sys.stderr)
            return 1
        shutil.rmtree(args.out_dir)
    meta = generate(args.out_dir, args.num_train, args.num_val, args.size, args.seed)
    total = len(CLASSES) * (meta['num_train'] + meta['num_val'])
    print(f'wrote {total} images of {len(CLASSES)} classes to {args.out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
