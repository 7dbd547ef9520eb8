"""The demo dataset on disk: Cityscapes layout, metadata, and :func:`generate`.

``tools/dataset/make_demo_data.py`` is its command line (and says what the scenes are).
"""
import functools
import json
import os
import shutil
import time
from pathlib import Path

import cv2
import numpy as np

from .demo_scene_parts import CLASSES, IGNORE
from .demo_scenes import render_scene

__all__ = ['CLASSES', 'DEFAULT_OUT', 'IGNORE', 'generate']

GENERATOR = 'afno_seg/tools/dataset/make_demo_data.py'
VERSION = 1  # bump when the drawing changes, so existing demo sets are regenerated
META_NAME = 'demo_meta.json'
IMG_SUFFIX = '_leftImg8bit.png'
SEG_SUFFIX = '_gtFine_labelTrainIds.png'
CITIES = {'train': ('arden', 'bramwell', 'corrin'), 'val': ('dunmore', 'elsby')}
ANNOTATED_FRAME = 19  # Cityscapes annotates the 20th frame of each snippet: <city>_<seq>_000019
DEFAULT_OUT = Path(__file__).resolve().parents[2] / 'data' / 'demo_cityscapes'


def _split_names(split, count):
    """Cityscapes-style stems ``<city>_<seq>_<frame>``, spread over the split's cities."""
    cities = CITIES[split]
    names, seq = [], {}
    for i in range(count):
        city = cities[i * len(cities) // count]
        seq[city] = seq.get(city, -1) + 1
        names.append((city, f'{city}_{seq[city]:06d}_{ANNOTATED_FRAME:06d}'))
    return names


def _count_files(out_dir):
    return sum(len(list((out_dir / d).rglob('*.png'))) for d in ('leftImg8bit', 'gtFine'))


def _read_meta(out_dir):
    try:
        meta = json.loads((out_dir / META_NAME).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get('generator') == GENERATOR else None


def _write_meta(out_dir, meta):
    tmp = out_dir / (META_NAME + '.tmp')
    tmp.write_text(json.dumps(meta, indent=2) + '\n')
    os.replace(tmp, out_dir / META_NAME)


def _print_summary(fractions):
    print(f'{"class":>14} ' + ' '.join(f'{s:>7}' for s in fractions))
    for c, name in enumerate(CLASSES + ('ignore',)):
        key = str(IGNORE if c == len(CLASSES) else c)
        print(f'{name:>14} ' + ' '.join(f'{100 * fractions[s][key]:6.2f}%' for s in fractions))


def generate(out_dir=DEFAULT_OUT, num_train=64, num_val=16, height=256, width=512, seed=0,
             force=False, verbose=True):
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
        verbose (bool): print progress and the class-frequency summary. Default: True.

    Returns:
        dict: ``out_dir``, ``skipped`` (True if an existing dataset was kept), ``seconds`` and
        ``class_fraction`` (split -> {train id as str -> fraction of pixels}, 255 = ignore).

    Raises:
        FileExistsError: ``out_dir`` exists, is not empty and was not written by this tool.
        ValueError: a size or count is out of range.
    """
    if min(num_train, num_val) < 1 or height < 32 or width < 32:
        raise ValueError('need num_train, num_val >= 1 and height, width >= 32')
    out_dir = Path(out_dir)
    log = functools.partial(print, flush=True) if verbose else (lambda *a, **k: None)
    params = dict(num_train=int(num_train), num_val=int(num_val), height=int(height),
                  width=int(width), seed=int(seed))
    expected_files = 2 * (num_train + num_val)
    start = time.perf_counter()
    if out_dir.exists():
        meta = _read_meta(out_dir) if out_dir.is_dir() else None
        if meta is None and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(
                f'{out_dir} exists and is not a demo dataset written by this tool (no valid '
                f'{META_NAME}); refusing to overwrite it. Pass another OUT_DIR or remove it '
                'yourself.')
        if (meta is not None and not force and meta.get('complete')
                and meta.get('version') == VERSION and meta.get('params') == params
                and _count_files(out_dir) == expected_files):
            log(f'[demo-data] {out_dir} already holds the demo dataset for {params}; nothing to do '
                '(--force regenerates).')
            if verbose:
                _print_summary(meta['class_fraction'])
            return dict(out_dir=str(out_dir), skipped=True, seconds=time.perf_counter() - start,
                        class_fraction=meta['class_fraction'])
        if meta is not None:
            log(f'[demo-data] regenerating the demo dataset in {out_dir}')
            for sub in ('leftImg8bit', 'gtFine'):
                shutil.rmtree(out_dir / sub, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(generator=GENERATOR, version=VERSION, params=params, complete=False,
                num_files=expected_files)
    _write_meta(out_dir, meta)  # marks the folder as ours before anything else is written
    fractions = {}
    for split_index, (split, count) in enumerate((('train', num_train), ('val', num_val))):
        t0 = time.perf_counter()
        histogram = np.zeros(256, np.int64)
        for i, (city, stem) in enumerate(_split_names(split, count)):
            rng = np.random.default_rng([seed, split_index, i])
            image, labels = render_scene(rng, height, width)
            histogram += np.bincount(labels.ravel(), minlength=256)
            bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
            for root, suffix, array in (('leftImg8bit', IMG_SUFFIX, bgr),
                                        ('gtFine', SEG_SUFFIX, labels)):
                folder = out_dir / root / split / city
                folder.mkdir(parents=True, exist_ok=True)
                if not cv2.imwrite(str(folder / (stem + suffix)), array):
                    raise OSError(f'could not write {folder / (stem + suffix)}')
        fractions[split] = {str(c): float(histogram[c] / histogram.sum())
                            for c in list(range(len(CLASSES))) + [IGNORE]}
        log(f'[demo-data] {split}: {count} images of {height}x{width} in '
            f'{time.perf_counter() - t0:.1f} s -> {out_dir / "leftImg8bit" / split}')
    meta.update(complete=True, class_fraction=fractions)
    _write_meta(out_dir, meta)
    seconds = time.perf_counter() - start
    if verbose:
        print(f'[demo-data] done in {seconds:.1f} s; class pixel frequencies:')
        _print_summary(fractions)
    return dict(out_dir=str(out_dir), skipped=False, seconds=seconds, class_fraction=fractions)
