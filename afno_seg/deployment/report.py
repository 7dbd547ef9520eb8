"""An evaluation report to look at: one self-contained HTML page and its PNGs, no server.

``DIR/report.html``: per-class IoU and accuracy (mmseg's ``IoUMetric`` formulas, NaN for a class
without pixels) as bars beside their table, the confusion matrix ``M[g, p]`` (pixels of ground
truth ``g`` predicted ``p``) row-normalised in percent as mmseg's ``confusion_matrix.py`` plots
it, and the ``k`` worst images by per-image mIoU (over the classes in its ground truth or
prediction) as image | ground truth | prediction | errors (wrong pixels red, ignored black).

:class:`SegReportMetric` (``tools/test.py --report DIR``) builds it during mmseg's test loop:
each rank keeps the labels of only its ``k`` worst images, so gathering the results stays small.
"""
import html
import os
import os.path as osp
from dataclasses import dataclass

import cv2
import numpy as np
from mmengine.evaluator import BaseMetric
from mmseg.registry import METRICS

from ..figures import new_figure
from .files import read_image, write_png

__all__ = ['SegReportMetric', 'WorstImage', 'class_scores', 'confusion_matrix', 'image_miou',
           'report_on_files', 'write_report']

PANEL_WIDTH = 480  # pixels of each of the four panels of a worst image


@dataclass
class WorstImage:
    """One of the worst images: its file, mIoU, ground truth and prediction."""
    path: str
    miou: float
    gt: np.ndarray
    pred: np.ndarray


def confusion_matrix(pred: np.ndarray, gt: np.ndarray, num_classes: int,
                     ignore_index: int = 255) -> np.ndarray:
    """``(C, C)`` int64 pixel counts, rows ground truth, columns prediction."""
    keep = (gt != ignore_index) & (gt < num_classes)
    index = gt[keep].astype(np.int64) * num_classes + pred[keep].astype(np.int64)
    return np.bincount(index, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def class_scores(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-class ``(IoU, Acc)`` of a confusion matrix (NaN where undefined)."""
    hits, gt, pred = np.diag(matrix).astype(float), matrix.sum(1), matrix.sum(0)
    with np.errstate(invalid='ignore', divide='ignore'):
        return hits / (gt + pred - hits), hits / gt


def image_miou(matrix: np.ndarray) -> float:
    iou = class_scores(matrix)[0]
    return float(np.nanmean(iou)) if np.isfinite(iou).any() else float('nan')


def _worst(images, k: int) -> list[WorstImage]:
    """The ``k`` lowest-mIoU of ``images`` (WorstImage), worst first; NaN mIoU left out."""
    return sorted((w for w in images if not np.isnan(w.miou)), key=lambda w: w.miou)[:k]


def _colour(label: np.ndarray, palette: np.ndarray) -> np.ndarray:
    colours = np.concatenate([palette[:, ::-1], np.zeros((256 - len(palette), 3))]).astype(np.uint8)
    return colours[label]


def _panels(worst: WorstImage, palette: np.ndarray, ignore_index: int) -> np.ndarray:
    """image | ground truth | prediction | errors, side by side, each PANEL_WIDTH wide."""
    height, width = worst.gt.shape
    image = read_image(worst.path)
    if image.shape[:2] != (height, width):
        image = cv2.resize(image, (width, height))
    errors = (image * 0.35).astype(np.uint8)
    errors[(worst.pred != worst.gt)] = (0, 0, 255)
    errors[worst.gt == ignore_index] = 0
    size = (PANEL_WIDTH, max(1, round(height * PANEL_WIDTH / width)))
    panels = [cv2.resize(image, size, interpolation=cv2.INTER_AREA)] + [
        cv2.resize(panel, size, interpolation=cv2.INTER_NEAREST) for panel in
        (_colour(worst.gt, palette), _colour(worst.pred, palette), errors)]
    return np.hstack([np.pad(p, ((0, 0), (0, 4), (0, 0)), constant_values=255) for p in panels])


def _plots(out_dir: str, classes: list[str], matrix: np.ndarray) -> None:
    iou, acc = class_scores(matrix)
    rows = np.arange(len(classes))
    figure, axes = new_figure(figsize=(6, 0.28 * len(classes) + 1.2))
    axes.barh(rows - 0.2, np.nan_to_num(iou) * 100, 0.4, label='IoU')
    axes.barh(rows + 0.2, np.nan_to_num(acc) * 100, 0.4, label='Acc')
    axes.set(yticks=rows, yticklabels=classes, xlim=(0, 100), xlabel='%')
    axes.invert_yaxis()
    axes.legend(loc='lower right')
    figure.savefig(osp.join(out_dir, 'classes.png'), dpi=100)
    with np.errstate(invalid='ignore', divide='ignore'):
        normalised = matrix / matrix.sum(1, keepdims=True) * 100
    size = 0.42 * len(classes) + 2
    figure, axes = new_figure(figsize=(size, size * 0.9))
    shown = axes.imshow(np.nan_to_num(normalised), cmap='viridis', vmin=0, vmax=100)
    figure.colorbar(shown, ax=axes, fraction=0.046, pad=0.04)
    axes.set(xlabel='Prediction', ylabel='Ground Truth', title='Normalized Confusion Matrix')
    axes.set_xticks(rows, classes, rotation=90)
    axes.set_yticks(rows, classes)
    for g, p in zip(*np.nonzero(normalised >= 1)):  # values, as mmseg's --include-values
        axes.text(p, g, f'{normalised[g, p]:.0f}', ha='center', va='center', fontsize=6,
                  color='black' if normalised[g, p] > 60 else 'white')
    figure.savefig(osp.join(out_dir, 'confusion.png'), dpi=100)


def _img(src: str, alt: str) -> str:
    return (f'<img src="{src}" alt="{alt}" '
            'onerror="console.error(\'image not found: \' + this.src)">')


def write_report(out_dir: str, classes: list[str], palette, matrix: np.ndarray,
                 worst: list[WorstImage], title: str = '', num_images: int = 0,
                 ignore_index: int = 255) -> str:
    """Write ``out_dir/report.html`` with ``classes.png``, ``confusion.png`` and
    ``worst/NN.png``; returns the page's path."""
    os.makedirs(osp.join(out_dir, 'worst'), exist_ok=True)
    _plots(out_dir, classes, matrix)
    iou, acc = class_scores(matrix)
    with np.errstate(invalid='ignore', divide='ignore'):
        overall = np.diag(matrix).sum() / matrix.sum() * 100
    cell = lambda v: '' if np.isnan(v) else f'{v * 100:.2f}'  # noqa: E731
    table = ''.join(f'<tr><td>{html.escape(name)}</td><td>{cell(i)}</td><td>{cell(a)}</td></tr>'
                    for name, i, a in zip(classes, iou, acc))
    figures = []
    for rank, item in enumerate(sorted(worst, key=lambda w: w.miou), 1):
        name = f'worst/{rank:02d}.png'
        write_png(osp.join(out_dir, name), _panels(item, np.asarray(palette), ignore_index))
        image = _img(name, 'image, ground truth, prediction, errors')
        figures.append(f'<figure><figcaption>{rank}. {html.escape(osp.basename(item.path))}: mIoU '
                       f'{item.miou * 100:.2f}</figcaption>{image}</figure>')
    page = f'''<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>Evaluation report {html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} .row{{display:flex;gap:2em;
align-items:flex-start}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} td:first-child{{text-align:left}}
figure{{margin:1em 0}} img{{max-width:100%}}</style></head><body>
<!-- a missing image says so in the browser console (the report's browser test reads it) -->
<h1>Evaluation report</h1><p>{html.escape(title)}</p>
<p>{num_images} images: mIoU {np.nanmean(iou) * 100:.2f}, mAcc {np.nanmean(acc) * 100:.2f},
aAcc {overall:.2f}</p>
<h2>Per class</h2><div class="row">{_img('classes.png', 'per-class IoU and accuracy')}
<table><tr><th>Class</th><th>IoU %</th><th>Acc %</th></tr>{table}</table></div>
<h2>Normalised confusion matrix</h2>{_img('confusion.png', 'confusion matrix')}
<h2>The {len(figures)} worst images by mIoU</h2>
<p>image | ground truth | prediction | errors (red: wrong, black: ignored)</p>
{''.join(figures)}
</body></html>
'''
    path = osp.join(out_dir, 'report.html')
    with open(path, 'w') as file:
        file.write(page)
    return path


def report_on_files(out_dir: str, pairs: list[tuple[str, str, str]], classes: list[str], palette,
                    worst: int = 8, title: str = '', ignore_index: int = 255) -> str:
    """:func:`write_report` from files: ``pairs`` of (image, predicted train ids PNG, ground
    truth train ids PNG), as ``tools/inference.py --labels`` has them."""
    matrix, scored = np.zeros((len(classes), len(classes)), np.int64), []
    for image, pred, gt in pairs:
        pred, gt = (cv2.imread(path, cv2.IMREAD_UNCHANGED) for path in (pred, gt))
        image_matrix = confusion_matrix(pred, gt, len(classes), ignore_index)
        matrix += image_matrix
        # the labels of the worst k seen so far, no more
        scored = _worst(scored + [WorstImage(image, image_miou(image_matrix), gt, pred)], worst)
    return write_report(out_dir, classes, palette, matrix, scored, title, len(pairs), ignore_index)


@METRICS.register_module()
class SegReportMetric(BaseMetric):
    """Writes :func:`write_report` for the test set (no metric of its own: add it beside
    ``IoUMetric``).

    Args:
        out_dir (str): Folder of the report.
        worst (int): How many worst images to show. Default: 8.
        ignore_index (int): Ground-truth value left out. Default: 255.
        title (str): A line under the heading (config, checkpoint). Default: ''.
    """

    def __init__(self, out_dir: str, worst: int = 8, ignore_index: int = 255, title: str = '',
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.out_dir, self.worst, self.title = out_dir, worst, title
        self.ignore_index = ignore_index

    def process(self, data_batch, data_samples) -> None:
        num_classes = len(self.dataset_meta['classes'])
        for sample in data_samples:
            pred = sample['pred_sem_seg']['data'][0].cpu().numpy().astype(np.uint8)
            gt = sample['gt_sem_seg']['data'][0].cpu().numpy().astype(np.uint8)
            matrix = confusion_matrix(pred, gt, num_classes, self.ignore_index)
            self.results.append(dict(matrix=matrix, miou=image_miou(matrix),
                                     path=sample['img_path'], gt=gt, pred=pred))
            kept = [r for r in self.results if r['gt'] is not None]
            if len(kept) > self.worst:  # this rank's best of its worst k+1 drops its labels
                best = max(kept, key=lambda r: np.inf if np.isnan(r['miou']) else r['miou'])
                best['gt'] = best['pred'] = None

    def compute_metrics(self, results: list) -> dict:
        matrix = sum(r['matrix'] for r in results)
        worst = _worst((WorstImage(r['path'], r['miou'], r['gt'], r['pred']) for r in results
                        if r['gt'] is not None), self.worst)
        path = write_report(self.out_dir, list(self.dataset_meta['classes']),
                            self.dataset_meta['palette'], matrix, worst, self.title,
                            len(results), self.ignore_index)
        print(f'evaluation report: {path}', flush=True)
        return {}
