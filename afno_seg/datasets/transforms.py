"""Data checks as mmcv transforms: a bad image or label file fails with its name and what is wrong
(:class:`ValidateSegMap` on a loaded label map, :class:`BadSampleGuard` around the loaders)."""
import logging
import os
import os.path as osp

import numpy as np
from mmcv.transforms import BaseTransform
from mmengine.logging import print_log
from mmseg.registry import TRANSFORMS

from ..engine.errors import UserError

__all__ = ['BadSampleError', 'BadSampleGuard', 'ValidateSegMap', 'file_problem']


class BadSampleError(UserError, ValueError):
    """A sample whose image or label cannot be used; the message names the file."""


@TRANSFORMS.register_module()
class ValidateSegMap(BaseTransform):
    """Check a loaded label map against the classes; put it right after ``LoadAnnotations``.

    Without it, a label of 33 in a 19-class dataset (a Cityscapes ``*_labelIds.png`` read instead of
    ``*_labelTrainIds.png``) surfaces as an index error deep inside the loss, or a CUDA
    device-side assert, naming no file.

    Args:
        num_classes (int): Valid labels are ``0 .. num_classes - 1``.
        ignore_index (int): The one extra allowed value. Default: 255.
    """

    def __init__(self, num_classes: int, ignore_index: int = 255) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def transform(self, results: dict) -> dict:
        seg_map = results['gt_seg_map']
        path = results.get('seg_map_path', '<label map>')
        if seg_map.ndim != 2:
            raise BadSampleError(
                f'{path}: label map has shape {seg_map.shape}, expected a single-channel image '
                '(H, W) of train ids; an RGB/colour label (e.g. *_gtFine_color.png) is not one.')
        img_shape = results.get('ori_shape') or results.get('img_shape')
        if img_shape is not None and tuple(seg_map.shape[:2]) != tuple(img_shape[:2]):
            raise BadSampleError(
                f'{path}: label map is {seg_map.shape[1]}x{seg_map.shape[0]} (WxH) but its image '
                f'{results.get("img_path", "")} is {img_shape[1]}x{img_shape[0]}; they must match.')
        values = np.unique(seg_map)
        bad = values[(values >= self.num_classes) & (values != self.ignore_index)]
        if bad.size:
            raise BadSampleError(
                f'{path}: label values {bad.tolist()[:10]} are outside the {self.num_classes} '
                f'classes (0..{self.num_classes - 1}) and the ignore value {self.ignore_index}. '
                'Labels must be train ids: for Cityscapes, the *_gtFine_labelTrainIds.png made by '
                'tools/dataset/cityscapes.py, not *_labelIds.png.')
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')


def file_problem(path: str, cause: str) -> str:
    """What is wrong with an image file that a loader could not read (``cause``: its error)."""
    if not osp.exists(path):
        return 'file not found'
    if osp.isdir(path):
        return 'is a folder, not a file'
    if not os.access(path, os.R_OK):
        return 'file is not readable (permission denied)'
    size = osp.getsize(path)
    if size == 0:
        return 'file is empty (0 bytes)'
    return f'cannot be decoded ({size} bytes: truncated, or not an image file; {cause})'


@TRANSFORMS.register_module()
class BadSampleGuard(BaseTransform):
    """Run loading/checking transforms; turn any failure into a message naming the file.

    mmcv/mmseg's loaders fail on a bad file with errors that often name no file
    (``AttributeError: 'NoneType' object has no attribute 'squeeze'``, ``OSError: image file is
    truncated``, ``cannot identify image file <_io.BytesIO ...>``). Wrapped here, the error says
    which file and what is wrong with it. With ``on_bad='skip'`` the sample is dropped instead:
    the guard logs a warning, counts it and returns ``None``, and mmengine's ``BaseDataset``
    draws another random index (train mode only, up to its ``max_refetch``; a test/val dataset
    refuses ``None``, so keep ``'raise'`` there).

    Args:
        transforms (list[dict]): The transforms to guard, typically ``LoadImageFromFile``,
            ``LoadAnnotations`` and ``ValidateSegMap``.
        on_bad (str): ``'raise'`` (stop with :class:`BadSampleError`) or ``'skip'``.
            Default: 'raise'.
        max_skipped (int | None): With ``'skip'``, raise anyway once more than this many samples
            were skipped in this data-loading process (a broken dataset, not a few bad files).
            ``None`` = no limit. Default: 100.
        requires (str | None): Run the wrapped transforms only on samples whose ``results`` hold
            this key with a value. ``'seg_map_path'`` lets one test pipeline serve evaluation
            (labels loaded and checked) and mmseg's inference APIs (an image alone passes; they
            remove only a top-level ``LoadAnnotations`` and swap a top-level
            ``LoadImageFromFile``). ``None`` = always run them. Default: None.
    """

    def __init__(self, transforms: list, on_bad: str = 'raise', max_skipped: int | None = 100,
                 requires: str | None = None):
        if on_bad not in ('raise', 'skip'):
            raise ValueError(f"on_bad must be 'raise' or 'skip', got {on_bad!r}")
        self.transforms = [TRANSFORMS.build(t) if isinstance(t, dict) else t for t in transforms]
        self.on_bad = on_bad
        self.max_skipped = max_skipped
        self.requires = requires
        self.skipped = 0  # per data-loading process (each worker counts its own)

    def _problem(self, transform, results: dict, error: Exception) -> str:
        if isinstance(error, BadSampleError):
            return str(error)
        name = type(transform).__name__
        cause = f'{type(error).__name__}: {error}'.strip()
        for kind, loader, key in (('image', 'LoadImage', 'img_path'),
                                  ('label map', 'LoadAnnotations', 'seg_map_path')):
            if loader in name and key in results:
                path = results[key]
                cause = cause.replace(f': {path}', '').replace(path, '<file>')
                return f'{path}: {kind} {file_problem(path, cause)}'
        return (f'{results.get("img_path", "<sample>")} (label {results.get("seg_map_path")}): '
                f'{name} failed ({cause})')

    def transform(self, results: dict) -> dict | None:
        if self.requires is not None and results.get(self.requires) is None:
            return results
        for transform in self.transforms:
            try:
                results = transform(results)
            except Exception as error:  # noqa: BLE001  (every loader error becomes a message)
                problem = self._problem(transform, results, error)
                if self.on_bad == 'raise':
                    raise BadSampleError(problem) from error
                self.skipped += 1
                if self.max_skipped is not None and self.skipped > self.max_skipped:
                    raise BadSampleError(
                        f'more than max_skipped={self.max_skipped} bad samples skipped in this '
                        f'process; the dataset looks broken. Last one: {problem}') from error
                print_log(f'skipped bad sample {self.skipped} (in this data-loading process): '
                          f'{problem}', logger='current', level=logging.WARNING)
                return None
            if results is None:  # a wrapped transform dropped the sample itself
                return None
        return results

    def __repr__(self) -> str:
        inner = ', '.join(repr(t) for t in self.transforms)
        return (f'{type(self).__name__}(transforms=[{inner}], on_bad={self.on_bad!r}, '
                f'max_skipped={self.max_skipped}, requires={self.requires!r})')
