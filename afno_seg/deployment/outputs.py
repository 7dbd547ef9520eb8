"""What ``tools/inference.py`` writes for an input: label PNGs, colour overlays, overlay videos.

* Label PNG: ``uint8`` train ids (0..num_classes-1), or with ``label_format='cityscapes'`` the
  Cityscapes ``labelIds`` the test server expects (through cityscapesscripts' ``trainId2label``,
  as mmseg's ``CityscapesMetric(format_only=True)`` converts).
* Overlay: ``(1 - opacity) * image + opacity * colour of the class`` with the dataset palette.

Every file appears complete or not at all (a kill leaves at most a hidden temporary file): PNGs
through :func:`~afno_seg.engine.atomic_io.atomic_write`, a video under a hidden name renamed when
its last frame is written.
"""
import os
import os.path as osp

import cv2
import numpy as np

from ..engine.atomic_io import atomic_write
from ..engine.errors import UserError

__all__ = ['VideoOverlayWriter', 'overlay', 'to_label_ids', 'write_png']


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
    """Overlay frames into the video ``path`` at ``fps`` (OpenCV, ``mp4v`` for .mp4, ``MJPG``
    for .avi)."""

    def __init__(self, path: str, fps: float) -> None:
        self.path, self.fps, self.writer, self.frames = path, fps, None, 0
        folder, name = osp.split(osp.abspath(path))  # the suffix stays: it picks the container
        self.partial = osp.join(folder, f'.{osp.splitext(name)[0]}.{os.getpid()}.partial'
                                f'{osp.splitext(name)[1]}')

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
