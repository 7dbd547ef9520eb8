"""The demo street scenes in ADE20K's layout and label convention (``make_demo_data.py --layout
ade20k``), so that mmseg's ADE20K configs (``mmseg::segformer/..._ade20k-512x512.py``) run on them
unchanged but for ``data_root``::

    OUT_DIR/images/{training,validation}/ADE_{train,val}_<8 digits>.jpg         RGB JPEG
    OUT_DIR/annotations/{training,validation}/ADE_{train,val}_<8 digits>.png    uint8 labels
    OUT_DIR/demo_meta.json                                                     parameters

ADE20K's SceneParsing labels (``ADEChallengeData2016``): 0 = "other objects" and 1..150 the
classes of mmseg's ``ADE20KDataset``; its configs load them with ``reduce_zero_label=True``
(0 -> 255 ignored, k -> k - 1). Each scene's Cityscapes train ids are mapped to the ADE20K class
of the same thing (:data:`CITYSCAPES_TO_ADE20K`: vegetation -> tree, terrain -> grass, traffic
sign -> signboard, rider -> person, motorcycle -> minibike); the ego-vehicle hood (Cityscapes'
ignore) and classes ADE20K lacks (train) become 0. The scenes are those of
:func:`afno_seg.datasets.demo_scenes.render_scene`, image ``i`` of a split drawn from
``numpy.random.default_rng([seed, split, i])`` as in the Cityscapes layout.
"""
import functools
import shutil
import time
from pathlib import Path

import cv2
import numpy as np

from .demo_dataset import _read_meta, _write_meta
from .demo_scene_parts import CLASSES, IGNORE
from .demo_scenes import render_scene

__all__ = ['ADE20K_OTHER', 'CITYSCAPES_TO_ADE20K', 'ade20k_label_table', 'generate_ade20k']

GENERATOR = 'afno_seg/tools/dataset/make_demo_data.py --layout ade20k'
VERSION = 1
ADE20K_OTHER = 0
SPLITS = (('training', 'train'), ('validation', 'val'))
#: Demo (Cityscapes) class name -> ADE20K class name (mmseg's ADE20KDataset spelling); None: 0.
CITYSCAPES_TO_ADE20K = {
    'road': 'road', 'sidewalk': 'sidewalk', 'building': 'building', 'wall': 'wall',
    'fence': 'fence', 'pole': 'pole', 'traffic light': 'traffic light',
    'traffic sign': 'signboard', 'vegetation': 'tree', 'terrain': 'grass', 'sky': 'sky',
    'person': 'person', 'rider': 'person', 'car': 'car', 'truck': 'truck', 'bus': 'bus',
    'train': None, 'motorcycle': 'minibike', 'bicycle': 'bicycle',
}


@functools.lru_cache(maxsize=1)
def ade20k_label_table() -> np.ndarray:
    """``uint8[256]``: Cityscapes train id (255 = ignore) -> ADE20K label (1..150, 0 = other),
    the ADE20K index read from mmseg's ``ADE20KDataset.METAINFO`` (names stripped)."""
    from mmseg.datasets import ADE20KDataset
    ade_classes = [name.strip() for name in ADE20KDataset.METAINFO['classes']]
    table = np.full(256, ADE20K_OTHER, np.uint8)
    for train_id, name in enumerate(CLASSES):
        target = CITYSCAPES_TO_ADE20K[name]
        if target is not None:
            table[train_id] = ade_classes.index(target) + 1
    table[IGNORE] = ADE20K_OTHER
    return table


def _count_files(out_dir: Path) -> int:
    return sum(len(list((out_dir / d).rglob('*.*'))) for d in ('images', 'annotations'))


def generate_ade20k(out_dir, num_train=64, num_val=16, height=256, width=512, seed=0,
                    force=False, verbose=True) -> dict:
    """Write the demo scenes in ADE20K's layout, or leave an identical existing set alone.

    Args and errors as :func:`afno_seg.datasets.demo_dataset.generate` (whose scenes these are).

    Returns:
        dict: ``out_dir``, ``skipped``, ``seconds`` and ``class_fraction`` (split -> {ADE20K
        label as str -> fraction of pixels}, labels present only).
    """
    if min(num_train, num_val) < 1 or height < 32 or width < 32:
        raise ValueError('need num_train, num_val >= 1 and height, width >= 32')
    out_dir = Path(out_dir)
    log = functools.partial(print, flush=True) if verbose else (lambda *a, **k: None)
    params = dict(layout='ade20k', num_train=int(num_train), num_val=int(num_val),
                  height=int(height), width=int(width), seed=int(seed))
    expected_files = 2 * (num_train + num_val)
    start = time.perf_counter()
    if out_dir.exists():
        meta = _read_meta(out_dir) if out_dir.is_dir() else None
        if meta is None and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(f'{out_dir} exists and is not a demo dataset written by this '
                                  'tool; refusing to overwrite it. Pass another OUT_DIR.')
        if (meta is not None and not force and meta.get('complete')
                and meta.get('version') == VERSION and meta.get('params') == params
                and _count_files(out_dir) == expected_files):
            log(f'[demo-data] {out_dir} already holds the ADE20K-layout demo set for {params}')
            return dict(out_dir=str(out_dir), skipped=True, seconds=time.perf_counter() - start,
                        class_fraction=meta['class_fraction'])
        for sub in ('images', 'annotations', 'leftImg8bit', 'gtFine'):
            shutil.rmtree(out_dir / sub, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(generator='afno_seg/tools/dataset/make_demo_data.py', layout_generator=GENERATOR,
                version=VERSION, params=params, complete=False, num_files=expected_files)
    _write_meta(out_dir, meta)  # marks the folder as ours before anything else is written
    table = ade20k_label_table()
    fractions = {}
    for split_index, ((folder, prefix), count) in enumerate(zip(SPLITS, (num_train, num_val))):
        histogram = np.zeros(256, np.int64)
        image_dir, label_dir = out_dir / 'images' / folder, out_dir / 'annotations' / folder
        image_dir.mkdir(parents=True, exist_ok=True)
        label_dir.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            rng = np.random.default_rng([seed, split_index, i])
            image, train_ids = render_scene(rng, height, width)
            labels = table[train_ids]
            histogram += np.bincount(labels.ravel(), minlength=256)
            stem = f'ADE_{prefix}_{i + 1:08d}'
            if not (cv2.imwrite(str(image_dir / f'{stem}.jpg'),
                                cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, 95])
                    and cv2.imwrite(str(label_dir / f'{stem}.png'), labels)):
                raise OSError(f'could not write {stem} under {out_dir}')
        fractions[folder] = {str(c): float(histogram[c] / histogram.sum())
                             for c in np.flatnonzero(histogram)}
        log(f'[demo-data] {folder}: {count} images of {height}x{width} -> {image_dir}')
    meta.update(complete=True, class_fraction=fractions)
    _write_meta(out_dir, meta)
    return dict(out_dir=str(out_dir), skipped=False, seconds=time.perf_counter() - start,
                class_fraction=fractions)
