"""What ``tools/inference.py`` writes: label PNGs, colour overlays, overlay videos, a JSON summary.

* Label PNG: ``uint8`` train ids (0..num_classes-1), or with ``label_format='cityscapes'`` the
  Cityscapes ``labelIds`` the test server expects (through cityscapesscripts' ``trainId2label``,
  as mmseg's ``CityscapesMetric(format_only=True)`` converts).
* Overlay: ``(1 - opacity) * image + opacity * colour of the class`` with the dataset palette.
"""
import json
import os
import os.path as osp

import cv2
import numpy as np

from ..engine.errors import UserError

__all__ = ['LABEL_FORMATS', 'VideoOverlayWriter', 'classes_present', 'overlay', 'to_label_ids',
           'write_png', 'write_summary']

LABEL_FORMATS = ('trainids', 'cityscapes')


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


def classes_present(label: np.ndarray, classes: list[str]) -> list[str]:
    """Names of the classes the label map holds, in class order."""
    return [classes[i] for i in np.unique(label).tolist() if i < len(classes)]


def write_png(path: str, image: np.ndarray) -> str:
    """Write an image (folders created), naming the file if it cannot be written."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    if not cv2.imwrite(path, image):
        raise UserError(f'{path}: cannot be written (no space, or no write permission?)')
    return path


class VideoOverlayWriter:
    """Overlay frames into a video (OpenCV, ``mp4v`` for .mp4, ``MJPG`` for .avi).

    Args:
        path (str): Output video file.
        fps (float): Frames per second (the input's).
    """

    def __init__(self, path: str, fps: float) -> None:
        self.path, self.fps, self.writer, self.frames = path, fps, None, 0

    def write(self, frame: np.ndarray) -> None:
        if self.writer is None:
            os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
            codec = 'MJPG' if self.path.lower().endswith('.avi') else 'mp4v'
            height, width = frame.shape[:2]
            self.writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*codec), self.fps,
                                          (width, height))
            if not self.writer.isOpened():
                raise UserError(f'{self.path}: OpenCV cannot write this video ({codec})')
        self.writer.write(frame)
        self.frames += 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()


def write_summary(path: str, summary: dict) -> str:
    """Write the JSON summary (indented, keys in the order given)."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(summary, f, indent=2)
        f.write('\n')
    return path
