"""What ``tools/inference.py`` reads and writes.

Reads image files, folders (recursive), glob patterns and videos; every way an input can be wrong
is a :class:`~afno_seg.engine.errors.UserError` naming it. Writes label PNGs (``uint8`` train ids,
or the Cityscapes ``labelIds`` the test server expects), overlays (``(1 - opacity) * image +
opacity * colour of the class``) and overlaid videos, each complete or not at all: PNGs through
:func:`~afno_seg.engine.atomic_io.atomic_write`, a video renamed when its last frame is written.
"""
import glob
import itertools
import os
import os.path as osp
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from mmcv import VideoReader

from ..datasets.transforms import file_problem
from ..engine.atomic_io import atomic_write, temp_name
from ..engine.errors import UserError

__all__ = ['IMAGE_SUFFIXES', 'VIDEO_SUFFIXES', 'InputFile', 'VideoOverlayWriter', 'collect_inputs',
           'glob_root', 'open_video', 'overlay', 'read_image', 'to_label_ids', 'write_png']

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff', '.webp')
VIDEO_SUFFIXES = ('.mp4', '.avi')
_KINDS = f'image ({", ".join(IMAGE_SUFFIXES)}) or video ({", ".join(VIDEO_SUFFIXES)})'


@dataclass(frozen=True)
class InputFile:
    """One file to segment; ``name``: its path relative to the folder it was found in (or its
    base name) without the suffix, the stem of its outputs."""
    path: str
    name: str
    is_video: bool


def _kind(path: str) -> str | None:
    suffix = osp.splitext(path)[1].lower()
    return 'image' if suffix in IMAGE_SUFFIXES else 'video' if suffix in VIDEO_SUFFIXES else None


def glob_root(pattern: str) -> str:
    """The folder part of ``pattern`` before its first wildcard (``photos`` of
    ``photos/**/*.jpg``); names are relative to it, so the folder tree below is kept."""
    parts = pattern.split(os.sep)
    fixed = list(itertools.takewhile(lambda part: not glob.has_magic(part), parts[:-1]))
    return os.sep.join(fixed) or ('/' if pattern.startswith('/') else '.')


def _files_of(spec: str) -> Iterator[tuple[str, str]]:
    """``(path, root)`` of every file one INPUT argument stands for (root: what names are relative
    to). Symlinked folders are not descended (a link loop cannot repeat files)."""
    if osp.isdir(spec):
        for folder, _, names in sorted(os.walk(spec)):
            for name in sorted(names):
                yield osp.join(folder, name), spec
    elif glob.has_magic(spec):
        root = glob_root(spec)
        # pathlib's ``**`` does not follow symlinked folders, glob.glob's does (loops repeat);
        # hidden files and folders are left out, as glob.glob leaves them
        for path in sorted(map(str, Path(root).glob(osp.relpath(spec, root)))):
            if osp.isfile(path) and not any(
                    part.startswith('.') for part in osp.relpath(path, root).split(os.sep)):
                yield path, root
    elif osp.isfile(spec):
        yield spec, osp.dirname(spec)
    else:
        raise UserError(f'input not found: {spec} (give image files, folders, glob patterns or '
                        f'videos {"/".join(VIDEO_SUFFIXES)})')


def collect_inputs(specs: Sequence[str]) -> list[InputFile]:
    """Expand INPUT arguments into files, in order, each once (by real path).

    Args:
        specs (Sequence[str]): Image or video files, folders (searched recursively for files with
            an image or video suffix) and glob patterns (``**`` recursive).

    Returns:
        list[InputFile]: Each named by its path below its folder or the pattern's fixed part (a
        file alone: its base name), the same from run to run; two inputs of one name are refused.
    """
    found, names = {}, {}  # found: {real path: InputFile}; names: {name: path}
    for spec in specs:
        matched = 0
        for path, root in _files_of(spec):
            kind = _kind(path)
            if kind is None:
                if not osp.isdir(spec) and not glob.has_magic(spec):  # named by itself
                    raise UserError(f'{path}: not an {_KINDS} by its suffix')
                continue
            matched += 1
            real = osp.realpath(path)
            if real in found:
                continue
            name = osp.splitext(osp.relpath(path, root) if root else osp.basename(path))[0]
            if name in names:
                raise UserError(
                    f'{names[name]} and {path} would both be written as {name}: pass the folder '
                    'above them (or a pattern from it), so each keeps its path below it')
            names[name] = path
            found[real] = InputFile(path, name, kind == 'video')
        if not matched:
            raise UserError(f'{spec}: no {_KINDS} in it')
    return list(found.values())


def read_image(path: str) -> np.ndarray:
    """An image as BGR ``uint8 (H, W, 3)`` (as mmcv's ``LoadImageFromFile`` reads it)."""
    data = np.fromfile(path, dtype=np.uint8) if osp.isfile(path) else None
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data is not None and data.size else None
    if image is None:
        raise UserError(f'{path}: image {file_problem(path, "OpenCV could not decode it")}')
    return image


def open_video(path: str) -> VideoReader:
    """mmcv's reader of a video: ``fps``, ``frame_cnt`` (its header's; 0 if OpenCV cannot tell)
    and BGR ``uint8 (H, W, 3)`` frames from ``read()`` (None at the end)."""
    video = VideoReader(path) if osp.isfile(path) else None
    if video is None or not video.opened:
        problem = 'file not found' if video is None else 'truncated, or not a video'
        raise UserError(f'{path}: video cannot be opened by OpenCV ({problem})')
    return video


def to_label_ids(train_ids: np.ndarray) -> np.ndarray:
    """Cityscapes train ids -> labelIds (``255``, ignore, -> 0, "unlabeled")."""
    from cityscapesscripts.helpers.labels import trainId2label
    lookup = np.zeros(256, dtype=np.uint8)
    for train_id, label in trainId2label.items():
        if 0 <= train_id < 255:
            lookup[train_id] = label.id
    return lookup[train_ids]


def overlay(image: np.ndarray, label: np.ndarray, palette: np.ndarray,
            opacity: float = 0.5) -> np.ndarray:
    """Blend class colours (``palette``: RGB rows) into a BGR image; returns BGR ``uint8``."""
    colours = palette[:, ::-1][np.minimum(label, len(palette) - 1)].astype(np.float32)
    blended = (1.0 - opacity) * image.astype(np.float32) + opacity * colours
    return np.clip(blended + 0.5, 0, 255).astype(np.uint8)


def write_png(path: str, image: np.ndarray) -> str:
    """Write an image atomically (folders created); a failure names the file."""
    ok, data = cv2.imencode('.png', image)
    if not ok:
        raise UserError(f'{path}: OpenCV cannot encode a {image.dtype} {image.shape} image as PNG')
    atomic_write(data.tobytes(), path)
    return path


class VideoOverlayWriter:
    """Overlay frames into the video ``path`` at ``fps`` (OpenCV; mp4v for .mp4, MJPG for .avi)."""

    def __init__(self, path: str, fps: float) -> None:
        self.path, self.fps, self.writer, self.frames = path, fps, None, 0
        # the suffix stays: it picks the container; a killed run's file is cleared as any temp
        self.partial = temp_name(path, osp.splitext(path)[1])

    def write(self, frame: np.ndarray) -> None:
        if self.writer is None:
            os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
            codec = 'MJPG' if self.path.lower().endswith('.avi') else 'mp4v'
            height, width = frame.shape[:2]
            self.writer = cv2.VideoWriter(self.partial, cv2.VideoWriter_fourcc(*codec), self.fps,
                                          (width, height))
            if not self.writer.isOpened():
                raise UserError(f'{self.path}: OpenCV cannot write this video ({codec})')
        self.writer.write(frame)
        self.frames += 1

    def close(self, complete: bool = True) -> None:
        """Finish the file; ``complete``: give it its name (else remove the partial file)."""
        if self.writer is not None:
            self.writer.release()
            if complete:
                os.replace(self.partial, self.path)
            elif osp.exists(self.partial):
                os.remove(self.partial)
