"""The evaluation report: its numbers against mmseg's IoUMetric, tools/test.py --report end to end,
and the page in a real browser (headless Chromium: loads from the file, no console message, every
image found, a screenshot that is not blank); the browser's check is shown to catch a missing
image.
"""
import re
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from test_mmseg_apis import checkpoint_of

from afno_seg.deployment.report import class_scores, confusion_matrix, image_miou

from conftest import TINY_CONFIG, cli_options, data_roots, load_script, metrics_of

BROWSER = next((shutil.which(name) for name in ('chromium', 'chromium-browser', 'google-chrome')
                if shutil.which(name)), None)


def test_scores_are_those_of_mmseg_iou_metric():
    from mmseg.evaluation import IoUMetric
    rng = np.random.default_rng(0)
    gt = rng.integers(0, 5, (40, 60)).astype(np.uint8)
    gt[:5] = 255
    pred = np.where(rng.random(gt.shape) < 0.7, gt, rng.integers(0, 5, gt.shape)).astype(np.uint8)
    pred[gt == 3] = 1  # class 3 never right; class 4 of 5 never predicted nor present below
    gt[gt == 4], pred[pred == 4] = 0, 0
    matrix = confusion_matrix(pred, gt, 5)
    assert matrix.sum() == (gt != 255).sum() and matrix[3, 3] == 0
    areas = IoUMetric.intersect_and_union(torch.from_numpy(pred), torch.from_numpy(gt), 5, 255)
    theirs = IoUMetric.total_area_to_metrics(*areas, metrics=['mIoU'])
    iou, acc = class_scores(matrix)
    np.testing.assert_allclose(iou, np.asarray(theirs['IoU']), equal_nan=True)
    np.testing.assert_allclose(acc, np.asarray(theirs['Acc']), equal_nan=True)
    assert np.isnan(iou[4]) and image_miou(matrix) == pytest.approx(np.nanmean(iou))


@pytest.fixture(scope='module')
def report(tiny_demo_data, tmp_path_factory) -> Path:
    """tools/test.py --report on the tiny val set (4 images); the work dir's metrics beside."""
    folder = tmp_path_factory.mktemp('report')
    checkpoint = checkpoint_of(Config.fromfile(TINY_CONFIG), folder / 'm.pth')
    load_script('tools/test.py').main([TINY_CONFIG, checkpoint, '--work-dir', str(folder / 'work'),
                                       '--report', str(folder / 'report'),
                                       *cli_options(data_roots(tiny_demo_data))])
    return folder


def test_test_tool_report_has_the_metric_of_the_test(report):
    page = (report / 'report' / 'report.html').read_text()
    miou = float(re.search(r'mIoU ([\d.]+)', page)[1])
    assert miou == pytest.approx(metrics_of(report / 'work')['mIoU'], abs=0.006)
    assert page.count('<figure>') == 4 and page.count('<tr>') == 20  # header + 19 classes
    links = re.findall(r'src="([^"]+)"', page)
    assert len(links) == 6 and all((report / 'report' / link).is_file() for link in links)
    worst = cv2.imread(str(report / 'report' / 'worst' / '01.png'))
    assert worst.shape[1] == 4 * (480 + 4)  # image | ground truth | prediction | errors


def open_in_browser(page: Path, screenshot: Path) -> str:
    """Chromium loads ``page`` from the file and screenshots it; returns its stderr log."""
    profile = screenshot.parent / f'{screenshot.stem}_profile'  # fresh for every run
    flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync',
             f'--user-data-dir={profile}', '--enable-logging=stderr', '--v=0',
             '--window-size=1280,2400', f'--screenshot={screenshot}']
    result = subprocess.run([BROWSER, *flags, page.as_uri()], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and screenshot.is_file(), result.stderr[-3000:]
    return result.stderr


def console_messages(log: str) -> list[str]:
    """The page's console messages in Chromium's log (the report has no script but the one that
    reports a missing image, so any message is a fault)."""
    return re.findall(r':CONSOLE[^\]]*\] (.*)', log)


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason='no Chromium here: install it (Debian: apt-get install '
                    'chromium; .ci/run does, as root) to run the report in a browser')
def test_report_renders_in_headless_chromium(report, tmp_path):
    log = open_in_browser(report / 'report' / 'report.html', tmp_path / 'shot.png')
    assert console_messages(log) == [], log[-3000:]
    shot = cv2.imread(str(tmp_path / 'shot.png'))
    assert shot.shape[:2] == (2400, 1280)
    colours = np.unique(shot.reshape(-1, 3), axis=0)
    assert shot.std() > 20 and len(colours) > 200  # charts and images, not a blank page
    # Negative control: the same page with one image gone is caught.
    broken = tmp_path / 'broken'
    shutil.copytree(report / 'report', broken)
    (broken / 'confusion.png').unlink()
    log = open_in_browser(broken / 'report.html', tmp_path / 'broken_shot.png')
    assert any('image not found' in m and 'confusion.png' in m for m in console_messages(log))
