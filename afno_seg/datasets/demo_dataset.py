"""The demo dataset on disk, in Cityscapes' or ADE20K's layout, and :func:`generate`.

``tools/dataset/make_demo_data.py`` is its command line (and says what the scenes are). Image
``i`` of a split is drawn from ``numpy.random.default_rng([seed, split, i])`` in both layouts.

The ADE20K layout is what mmseg's ADE20K configs read (``images/{training,validation}/*.jpg``,
``annotations/...png``), with SceneParsing's labels: 0 = "other objects" and 1..150 the classes
of mmseg's ``ADE20KDataset``, loaded with ``reduce_zero_label=True``. Each Cityscapes train id
becomes the ADE20K class of the same thing (:data:`CITYSCAPES_TO_ADE20K`); the ego-vehicle hood
(Cityscapes' ignore) and classes ADE20K lacks (train) become 0.
"""
import functools
import json
import shutil
import time
from pathlib import Path

import cv2
import numpy as np

from ..engine.atomic_io import atomic_write
from .demo_scene_parts import CLASSES, IGNORE
from .demo_scenes import render_scene

__all__ = ['CITYSCAPES_TO_ADE20K', 'CLASSES', 'DEFAULT_OUT', 'IGNORE', 'ade20k_label_table',
           'generate']

GENERATOR = 'afno_seg/tools/dataset/make_demo_data.py'
VERSION = 1  # bump when the drawing changes, so existing demo sets are regenerated
META_NAME = 'demo_meta.json'
CITIES = {'train': ('arden', 'bramwell', 'corrin'), 'val': ('dunmore', 'elsby')}
ANNOTATED_FRAME = 19  # Cityscapes annotates the 20th frame of each snippet: <city>_<seq>_000019
DEFAULT_OUT = Path(__file__).resolve().parents[2] / 'data' / 'demo_cityscapes'
#: Layout -> (image root, label root, split folders).
LAYOUTS = {'cityscapes': ('leftImg8bit', 'gtFine', ('train', 'val')),
           'ade20k': ('images', 'annotations', ('training', 'validation'))}
#: Demo (Cityscapes) classes named otherwise in ADE20K (mmseg's ADE20KDataset spelling); the others
#: keep their name. None: ADE20K has no such class (label 0).
CITYSCAPES_TO_ADE20K = {'traffic sign': 'signboard', 'vegetation': 'tree', 'terrain': 'grass',
                        'rider': 'person', 'train': None, 'motorcycle': 'minibike'}


@functools.lru_cache(maxsize=1)
def ade20k_label_table() -> np.ndarray:
    """``uint8[256]``: Cityscapes train id (255 = ignore) -> ADE20K label (1..150, 0 = other),
    the ADE20K index read from mmseg's ``ADE20KDataset.METAINFO`` (names stripped)."""
    from mmseg.datasets import ADE20KDataset
    ade_classes = [name.strip() for name in ADE20KDataset.METAINFO['classes']]
    table = np.zeros(256, np.uint8)
    for train_id, name in enumerate(CLASSES):
        ade_name = CITYSCAPES_TO_ADE20K.get(name, name)
        if ade_name is not None:
            table[train_id] = ade_classes.index(ade_name) + 1
    return table


def _file_names(layout, split, count):
    """The ``(image, label)`` paths of a split's images, relative to the image and label roots:
    ADE20K's ``ADE_<prefix>_<8 digits>``, or Cityscapes' ``<city>/<city>_<seq>_<frame>`` spread
    over the split's cities."""
    if layout == 'ade20k':
        prefix = 'train' if split == 'training' else 'val'
        stems = [f'{split}/ADE_{prefix}_{i + 1:08d}' for i in range(count)]
        return [(f'{stem}.jpg', f'{stem}.png') for stem in stems]
    cities = CITIES[split]
    names, seq = [], {}
    for i in range(count):
        city = cities[i * len(cities) // count]
        seq[city] = seq.get(city, -1) + 1
        stem = f'{split}/{city}/{city}_{seq[city]:06d}_{ANNOTATED_FRAME:06d}'
        names.append((f'{stem}_leftImg8bit.png', f'{stem}_gtFine_labelTrainIds.png'))
    return names


def _read_meta(out_dir):
    try:
        meta = json.loads((out_dir / META_NAME).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get('generator') == GENERATOR else None


def _write_meta(out_dir, meta):
    atomic_write(json.dumps(meta, indent=2) + '\n', out_dir / META_NAME)


def _print_summary(fractions):
    print(f'{"class":>14} ' + ' '.join(f'{s:>7}' for s in fractions))
    for label, name in [*enumerate(CLASSES), (IGNORE, 'ignore')]:
        cells = (f'{100 * fractions[s].get(str(label), 0):6.2f}%' for s in fractions)
        print(f'{name:>14} ' + ' '.join(cells))


def generate(out_dir=DEFAULT_OUT, num_train=64, num_val=16, height=256, width=512, seed=0,
             force=False, verbose=True, layout='cityscapes'):
    """Write the demo dataset, or leave an identical existing one alone.

    Args:
        out_dir (str | Path): dataset root. Default: ``<repo>/data/demo_cityscapes``.
        num_train (int): training images. Default: 64.
        num_val (int): validation images. Default: 16.
        height (int): image height in pixels. Default: 256.
        width (int): image width in pixels. Default: 512.
        seed (int): base seed; the same seed gives byte-identical files. Default: 0.
        force (bool): regenerate even if a complete dataset with these parameters exists.
            Default: False.
        verbose (bool): print progress and (Cityscapes) the class-frequency summary.
            Default: True.
        layout (str): 'cityscapes' (19 train ids, 255 = ignore) or 'ade20k'.
            Default: 'cityscapes'.

    Returns:
        dict: ``out_dir``, ``skipped`` (True if an existing dataset was kept), ``seconds`` and
        ``class_fraction`` (split -> {label as str -> fraction of pixels}, labels present only).

    Raises:
        FileExistsError: ``out_dir`` exists, is not empty and was not written by this tool.
        ValueError: a size or count is out of range.
    """
    if min(num_train, num_val) < 1 or height < 32 or width < 32:
        raise ValueError('need num_train, num_val >= 1 and height, width >= 32')
    out_dir = Path(out_dir)
    image_root, label_root, splits = LAYOUTS[layout]
    log = functools.partial(print, flush=True) if verbose else (lambda *a, **k: None)
    params = dict(num_train=int(num_train), num_val=int(num_val), height=int(height),
                  width=int(width), seed=int(seed))
    if layout != 'cityscapes':
        params = dict(layout=layout, **params)
    expected_files = 2 * (num_train + num_val)
    start = time.perf_counter()
    if out_dir.exists():
        meta = _read_meta(out_dir) if out_dir.is_dir() else None
        if meta is None and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(
                f'{out_dir} exists and is not a demo dataset written by this tool (no valid '
                f'{META_NAME}); refusing to overwrite it. Pass another OUT_DIR or remove it '
                'yourself.')
        written = sum(len(list((out_dir / d).rglob('*.*'))) for d in (image_root, label_root))
        if (meta is not None and not force and meta.get('complete')
                and meta.get('version') == VERSION and meta.get('params') == params
                and written == expected_files):
            log(f'[demo-data] {out_dir} already holds the demo dataset for {params}; nothing to do '
                '(--force regenerates).')
            if verbose and layout == 'cityscapes':
                _print_summary(meta['class_fraction'])
            return dict(out_dir=str(out_dir), skipped=True, seconds=time.perf_counter() - start,
                        class_fraction=meta['class_fraction'])
        if meta is not None:
            log(f'[demo-data] regenerating the demo dataset in {out_dir}')
            for sub in ('leftImg8bit', 'gtFine', 'images', 'annotations'):  # either layout's
                shutil.rmtree(out_dir / sub, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(generator=GENERATOR, version=VERSION, params=params, complete=False,
                num_files=expected_files)
    _write_meta(out_dir, meta)  # marks the folder as ours before anything else is written
    table = ade20k_label_table() if layout == 'ade20k' else np.arange(256, dtype=np.uint8)
    fractions = {}
    for split_index, (split, count) in enumerate(zip(splits, (num_train, num_val))):
        t0 = time.perf_counter()
        histogram = np.zeros(256, np.int64)
        for i, (image_name, label_name) in enumerate(_file_names(layout, split, count)):
            image, train_ids = render_scene(np.random.default_rng([seed, split_index, i]),
                                            height, width)
            labels = table[train_ids]
            histogram += np.bincount(labels.ravel(), minlength=256)
            for path, array in ((out_dir / image_root / image_name,
                                 cv2.cvtColor(image, cv2.COLOR_RGB2BGR)),
                                (out_dir / label_root / label_name, labels)):
                path.parent.mkdir(parents=True, exist_ok=True)
                if not cv2.imwrite(str(path), array):  # JPEG at OpenCV's default quality, 95
                    raise OSError(f'could not write {path}')
        fractions[split] = {str(c): float(histogram[c] / histogram.sum())
                            for c in np.flatnonzero(histogram)}
        log(f'[demo-data] {split}: {count} images of {height}x{width} in '
            f'{time.perf_counter() - t0:.1f} s -> {out_dir / image_root / split}')
    meta.update(complete=True, class_fraction=fractions)
    _write_meta(out_dir, meta)
    seconds = time.perf_counter() - start
    if verbose and layout == 'cityscapes':
        print(f'[demo-data] done in {seconds:.1f} s; class pixel frequencies:')
        _print_summary(fractions)
    return dict(out_dir=str(out_dir), skipped=False, seconds=seconds, class_fraction=fractions)
