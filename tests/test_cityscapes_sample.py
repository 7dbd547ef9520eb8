"""The Cityscapes data path on the one real frame in ../shared/data/cityscapes_sample (read in
place): mmseg's dataset and test pipeline from our base config, IoUMetric against mIoU computed
here independently, and tools/dataset/cityscapes.py (labelIds and polygons -> labelTrainIds)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.evaluator import Evaluator
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.registry import DATASETS, METRICS
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(os.environ.get('AFNO_SEG_CITYSCAPES_SAMPLE',
                             ROOT.parent / 'shared' / 'data' / 'cityscapes_sample'))
FRAME = 'frankfurt/frankfurt_000000_000294'
BASE = ROOT / 'configs' / '_base_' / 'segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py'
# Cityscapes' 19 training classes, labelId -> trainId (Cordts et al. 2016, Table/labels.py);
# written out here so the test does not reuse the tool's lookup table.
TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11,
             25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}

# The tool's tests on folders made in tmp_path run without ../shared.
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f'no Cityscapes sample at {SAMPLE}')


def gt_path(kind: str) -> Path:
    return SAMPLE / 'gtFine' / 'val' / f'{FRAME}_gtFine_{kind}.png'


def load_tool():
    spec = importlib.util.spec_from_file_location('cityscapes_tool',
                                                  ROOT / 'tools' / 'dataset' / 'cityscapes.py')
    module = importlib.util.module_from_spec(spec)
    sys.modules['cityscapes_tool'] = module  # workers of --nproc unpickle functions by module name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def sample_dataset():
    init_default_scope('mmseg')
    cfg = Config.fromfile(str(BASE))
    dataset_cfg = cfg.val_dataloader.dataset
    dataset_cfg.data_root = str(SAMPLE)
    return DATASETS.build(dataset_cfg), cfg


def expected_metrics(pred: np.ndarray, gt: np.ndarray) -> tuple[float, float]:
    """(mIoU, aAcc) in percent over the classes present in prediction or ground truth."""
    valid = gt != 255
    ious = []
    for c in range(19):
        inter = np.sum((pred == c) & (gt == c) & valid)
        union = np.sum(((pred == c) | (gt == c)) & valid)
        if union:
            ious.append(inter / union)
    return 100 * float(np.mean(ious)), 100 * float(np.mean(pred[valid] == gt[valid]))


def evaluate(cfg, dataset, sample, prediction: np.ndarray) -> dict:
    evaluator = Evaluator(METRICS.build(cfg.val_evaluator))
    evaluator.dataset_meta = dataset.metainfo
    sample = sample.clone()
    sample.pred_sem_seg = PixelData(data=torch.from_numpy(prediction)[None].long())
    evaluator.process(data_samples=[sample], data_batch=None)
    return evaluator.evaluate(1)


@needs_sample
def test_pipeline_reads_the_frame(sample_dataset):
    dataset, _ = sample_dataset
    assert len(dataset) == 1 and len(dataset.metainfo['classes']) == 19
    item = dataset[0]
    sample = item['data_samples']
    # The test pipeline resizes the image to 2048x1024 (x8 here) and keeps the labels as they are.
    assert tuple(item['inputs'].shape) == (3, 1024, 2048)
    assert sample.ori_shape == (128, 256) and sample.img_shape == (1024, 2048)
    labels = np.asarray(Image.open(gt_path('labelTrainIds')))
    assert np.array_equal(sample.gt_sem_seg.data[0].numpy(), labels)
    image = np.asarray(Image.open(SAMPLE / 'leftImg8bit' / 'val' / f'{FRAME}_leftImg8bit.png'))
    # Nearest-neighbour-free check of the channel order: mean colour, BGR in the packed tensor.
    packed_means = item['inputs'].float().mean(dim=(1, 2)).numpy()
    np.testing.assert_allclose(packed_means, image.reshape(-1, 3).mean(0)[::-1], atol=1.5)


@needs_sample
def test_iou_metric_perfect_and_corrupted(sample_dataset):
    dataset, cfg = sample_dataset
    sample = dataset[0]['data_samples']
    gt = sample.gt_sem_seg.data[0].numpy().astype(np.int64)
    perfect_pred = np.where(gt == 255, 0, gt)  # ignore pixels do not count, whatever is there
    metrics = evaluate(cfg, dataset, sample, perfect_pred)
    assert metrics['mIoU'] == 100.0 and metrics['aAcc'] == 100.0

    corrupted = perfect_pred.copy()
    corrupted[:64, :128] = (corrupted[:64, :128] + 1) % 19  # a quarter of the frame shifted
    corrupted[100:, 200:] = 13  # a block called "car"
    expected_miou, expected_acc = expected_metrics(corrupted, gt)
    metrics = evaluate(cfg, dataset, sample, corrupted)
    assert metrics['mIoU'] < 90
    assert metrics['mIoU'] == pytest.approx(expected_miou, abs=0.01)
    assert metrics['aAcc'] == pytest.approx(expected_acc, abs=0.01)


@needs_sample
def test_tool_label_ids_to_train_ids(tmp_path):
    tool = load_tool()
    assert tool.main([str(SAMPLE), '--out-dir', str(tmp_path)]) == 0  # reads the sample in place
    made = np.asarray(Image.open(tmp_path / 'gtFine' / 'val' / f'{FRAME}_gtFine_labelTrainIds.png'))
    label_ids = np.asarray(Image.open(gt_path('labelIds')))
    lut = np.full(256, 255, np.uint8)
    for label_id, train_id in TRAIN_IDS.items():
        lut[label_id] = train_id
    assert np.array_equal(made, lut[label_ids])
    # The shipped labelTrainIds were resized separately upstream: equal but for 77 edge pixels.
    shipped = np.asarray(Image.open(gt_path('labelTrainIds')))
    assert made.shape == shipped.shape and np.mean(made == shipped) > 0.995
    assert (tmp_path / 'val.txt').read_text() == FRAME + '\n'
    assert not (tmp_path / 'train.txt').exists()


def polygons(width, height, objects):
    return dict(imgWidth=width, imgHeight=height,
                objects=[dict(label=label, polygon=polygon) for label, polygon in objects])


def test_tool_polygons_take_precedence_and_nproc(tmp_path):
    tool = load_tool()
    city = tmp_path / 'gtFine' / 'train' / 'aachen'
    city.mkdir(parents=True)
    road = ('road', [[0, 8], [31, 8], [31, 15], [0, 15]])
    car = ('car', [[4, 2], [12, 2], [12, 6], [4, 6]])
    for frame in ('aachen_000000_000019', 'aachen_000001_000019'):
        (city / f'{frame}_gtFine_polygons.json').write_text(json.dumps(polygons(32, 16,
                                                                                 [road, car])))
        # A conflicting labelIds file (all "sky"): the polygons must win.
        Image.fromarray(np.full((16, 32), 23, np.uint8)).save(city / f'{frame}_gtFine_labelIds.png')
    assert tool.main([str(tmp_path), '--nproc', '2']) == 0
    for frame in ('aachen_000000_000019', 'aachen_000001_000019'):
        made = np.asarray(Image.open(city / f'{frame}_gtFine_labelTrainIds.png'))
        assert made.shape == (16, 32)
        assert made[12, 2] == 0 and made[4, 8] == 13 and made[0, 20] == 255
        assert set(np.unique(made)) == {0, 13, 255}
    assert (tmp_path / 'train.txt').read_text().splitlines() == [
        'aachen/aachen_000000_000019', 'aachen/aachen_000001_000019']


def test_tool_wrong_folder_explains_layout(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / 'tools' / 'dataset' / 'cityscapes.py'),
                             str(tmp_path / 'not_there')], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert 'not_there' in result.stderr and 'leftImg8bit/{train,val,test}' in result.stderr
    (tmp_path / 'gtFine' / 'val').mkdir(parents=True)  # right folders, no annotations
    tool = load_tool()
    assert tool.main([str(tmp_path)]) == 1
    (tmp_path / 'other').mkdir()
    assert tool.main([str(tmp_path / 'other')]) == 1
