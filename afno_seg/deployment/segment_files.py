"""Segment image and video files into an output folder: what ``tools/inference.py`` does.

For an image ``NAME.png`` (``NAME``: its path below the folder or pattern it was found through):
``OUT/labels/NAME.png`` (train ids, or Cityscapes labelIds), ``OUT/overlays/NAME.png``; for a
video ``NAME.mp4``: ``OUT/videos/NAME.mp4`` with every frame overlaid. ``OUT/summary.json`` lists
per input its size, inference time and the classes present.
"""
import itertools
import os.path as osp
import time
from collections.abc import Iterator, Sequence

import numpy as np
from mmengine.utils import ProgressBar

from .inputs import InputFile, read_image, read_video_frames, video_frame_count
from .outputs import (
    VideoOverlayWriter,
    classes_present,
    overlay,
    to_label_ids,
    write_png,
    write_summary,
)
from .predictor import Segmenter

__all__ = ['segment_files']


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _image_entry(item: InputFile, image: np.ndarray, label: np.ndarray, seconds: float,
                 outputs: dict, classes: list[str]) -> dict:
    return dict(input=item.path, height=int(image.shape[0]), width=int(image.shape[1]),
                seconds=round(seconds, 4), classes=classes_present(label, classes), **outputs)


def segment_files(segmenter: Segmenter, files: Sequence[InputFile], out_dir: str,
                  label_format: str = 'trainids', opacity: float = 0.5, batch_size: int = 1,
                  meta: dict | None = None, progress: bool = True) -> dict:
    """Segment ``files`` and write labels, overlays, videos and ``summary.json`` under ``out_dir``.

    Args:
        segmenter (Segmenter): The model (PyTorch or onnxruntime backend).
        files (Sequence[InputFile]): From :func:`.collect_inputs`.
        out_dir (str): Output folder.
        label_format (str): ``'trainids'`` or ``'cityscapes'`` (labelIds). Default: 'trainids'.
        opacity (float): Colour weight of the overlays, in [0, 1]. Default: 0.5.
        batch_size (int): Images per forward pass (equal-sized ones share a batch). Default: 1.
        meta (dict, optional): Extra entries for the summary (config, backend, ...).
            Default: None.
        progress (bool): Show mmengine's progress bar (one step per image or video frame).
            Default: True.

    Returns:
        dict: The summary written to ``out_dir/summary.json``.
    """
    dataset_meta = segmenter.model.dataset_meta
    classes, palette = list(dataset_meta['classes']), np.asarray(dataset_meta['palette'])
    images = [item for item in files if not item.is_video]
    videos = [item for item in files if item.is_video]
    steps = len(images) + sum(video_frame_count(item.path) for item in videos)
    bar = ProgressBar(steps) if progress and steps else None
    entries = []
    for batch in _batches(images, batch_size):
        arrays = [read_image(item.path) for item in batch]
        for item, image, prediction in zip(batch, arrays, segmenter(arrays)):
            label = prediction.label
            written = dict(
                label=write_png(osp.join(out_dir, 'labels', item.name + '.png'),
                                to_label_ids(label) if label_format == 'cityscapes' else label),
                overlay=write_png(osp.join(out_dir, 'overlays', item.name + '.png'),
                                  overlay(image, label, palette, opacity)))
            entries.append(_image_entry(item, image, label, prediction.seconds, written, classes))
            if bar:
                bar.update()
    for item in videos:
        entries.append(_segment_video(segmenter, item, out_dir, palette, classes, opacity,
                                      batch_size, bar))
    summary = dict(**(meta or {}), label_format=label_format, num_inputs=len(entries),
                   inputs=entries)
    write_summary(osp.join(out_dir, 'summary.json'), summary)
    if bar:
        print()  # end the progress bar's line
    return summary


def _segment_video(segmenter: Segmenter, item: InputFile, out_dir: str, palette: np.ndarray,
                   classes: list[str], opacity: float, batch_size: int, bar) -> dict:
    """Overlay every frame of a video into ``OUT/videos/NAME.<suffix>``."""
    frames, fps, _ = read_video_frames(item.path)
    writer = VideoOverlayWriter(osp.join(out_dir, 'videos', item.name + osp.splitext(
        item.path)[1].lower()), fps)
    seen, seconds, shape, start = set(), 0.0, None, time.perf_counter()
    try:
        chunk = []
        for frame in itertools.chain(frames, [None]):  # None: flush the last chunk
            if frame is not None:
                chunk.append(frame)
            if chunk and (frame is None or len(chunk) == batch_size):
                for image, prediction in zip(chunk, segmenter(chunk)):
                    writer.write(overlay(image, prediction.label, palette, opacity))
                    seen.update(np.unique(prediction.label).tolist())
                    seconds += prediction.seconds
                    shape = image.shape
                    if bar:
                        bar.update()
                chunk = []
    finally:
        writer.close()
    frames_done = writer.frames
    return dict(input=item.path, video=writer.path, frames=frames_done, fps=fps,
                height=int(shape[0]) if shape else 0, width=int(shape[1]) if shape else 0,
                seconds=round(seconds / max(frames_done, 1), 4),
                total_seconds=round(time.perf_counter() - start, 2),
                classes=[classes[i] for i in sorted(seen) if i < len(classes)])
