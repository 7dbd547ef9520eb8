"""Bad data: a broken image or label map is an error naming the file and the problem, or (skip
mode) skipped and counted; an empty split or annotation list is one clear error.

The guards are tested on mmseg's CityscapesDataset over a copy of the tiny demo data, and in one
in-process training run. docs/reliability.md quotes the messages these tests produce.
"""
import glob
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmengine.registry import init_default_scope

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.datasets import transforms as seg_transforms
from afno_seg.datasets.transforms import BadSampleError
from afno_seg.engine import UserError, build_runner, load_config

from conftest import TINY_CONFIG, data_roots, make_runner


def _truncate(path):
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:len(data) // 2])


def _relabel(path, change):
    label = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    cv2.imwrite(path, change(label).astype(np.uint8))


def _out_of_range(label):
    label[:3, :3] = 33  # a labelIds value (e.g. *_labelIds.png read by mistake)
    label[5, 5] = 200
    return label


# (what to damage, how, fragments the message must hold)
BAD_SAMPLES = {
    'image truncated': ('img', _truncate, ['image cannot be decoded', 'truncated']),
    'image empty': ('img', lambda p: Path(p).write_bytes(b''), ['image file is empty (0 bytes)']),
    'image not an image': ('img', lambda p: Path(p).write_text('<html>404</html>'),
                           ['image cannot be decoded (16 bytes']),
    'image missing': ('img', os.remove, ['image file not found']),
    'label truncated': ('seg', _truncate, ['label map cannot be decoded', 'truncated']),
    'label empty': ('seg', lambda p: Path(p).write_bytes(b''), ['label map file is empty']),
    'label missing': ('seg', os.remove, ['label map file not found']),
    'label wrong size': ('seg', lambda p: _relabel(p, lambda lab: lab[:32]),
                         ['label map is 128x32 (WxH) but its image', 'is 128x64']),
    'label outside classes': ('seg', lambda p: _relabel(p, _out_of_range),
                              ['label values [33, 200] are outside the 19 classes', '255']),
    'label RGB': ('seg', lambda p: _relabel(p, lambda lab: np.stack([lab] * 3, axis=-1)),
                  ['label map has shape (64, 128, 3), expected a single-channel image']),
}

GUARDED_LOADING = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                   dict(type='ValidateSegMap', num_classes=19)]


def build_dataset(root, on_bad='raise', max_skipped=100, split='train'):
    from mmseg.registry import DATASETS
    init_default_scope('mmseg')
    return DATASETS.build(dict(
        type='CityscapesDataset', data_root=str(root),
        data_prefix=dict(img_path=f'leftImg8bit/{split}', seg_map_path=f'gtFine/{split}'),
        pipeline=[dict(type='BadSampleGuard', transforms=GUARDED_LOADING, on_bad=on_bad,
                       max_skipped=max_skipped), dict(type='PackSegInputs')]))


@pytest.fixture
def data_copy(tiny_demo_data, tmp_path):
    root = tmp_path / 'data'
    shutil.copytree(tiny_demo_data, root)
    return root


@pytest.mark.parametrize('case', sorted(BAD_SAMPLES))
def test_bad_sample_error_names_the_file_and_the_problem(data_copy, case):
    field, damage, fragments = BAD_SAMPLES[case]
    dataset = build_dataset(data_copy)
    index = 3
    path = dataset.get_data_info(index)[f'{field}_path' if field == 'img' else 'seg_map_path']
    damage(path)
    with pytest.raises(BadSampleError) as error:
        dataset[index]
    message = str(error.value)
    assert message.startswith(path), message
    for fragment in fragments:
        assert fragment in message, message
    dataset[index + 1]  # the other samples still load


def test_skip_mode_logs_counts_and_never_returns_a_bad_sample(data_copy, monkeypatch):
    warnings = []
    monkeypatch.setattr(seg_transforms, 'print_log', lambda msg, **kw: warnings.append(msg))
    dataset = build_dataset(data_copy, on_bad='skip')
    bad = {}
    for index, case in zip((1, 4, 6), ('image truncated', 'label outside classes',
                                       'label missing')):
        field, damage, _ = BAD_SAMPLES[case]
        info = dataset.get_data_info(index)
        path = info['img_path'] if field == 'img' else info['seg_map_path']
        damage(path)
        bad[info['img_path']] = path
    served = [dataset[index]['data_samples'].img_path for index in range(len(dataset))]
    assert not set(served) & set(bad)  # every index served a good sample instead
    guard = dataset.pipeline.transforms[0]
    assert guard.skipped == len(warnings) >= len(bad)
    assert all(any(path in w for path in bad.values()) for w in warnings)
    assert warnings[-1].startswith(f'skipped bad sample {guard.skipped} ')


def test_skip_mode_stops_after_max_skipped(data_copy, monkeypatch):
    dataset = build_dataset(data_copy, on_bad='skip', max_skipped=1)
    for index in (0, 1):
        _truncate(dataset.get_data_info(index)['img_path'])
    # mmengine refetches a random index after a skip; one that is bad again (0 or 1) would be
    # the second skip already and make this test depend on numpy's global random state
    monkeypatch.setattr(dataset, '_rand_another', lambda: 2)
    dataset[0]
    with pytest.raises(BadSampleError, match='more than max_skipped=1 bad samples'):
        dataset[1]


def test_training_run_skips_bad_samples(data_copy, tmp_path):
    guarded = [dict(type='BadSampleGuard', transforms=GUARDED_LOADING, on_bad='skip')]
    options = {'train_dataloader.dataset.pipeline': guarded + [
        dict(type='RandomCrop', crop_size=(64, 64)), dict(type='PackSegInputs')],
        'train_cfg.max_iters': 3}
    for index in (0, 5):
        _truncate(sorted(glob.glob(str(data_copy / 'leftImg8bit/train/*/*.png')))[index])
    runner = make_runner(data_copy, tmp_path / 'work', **options)
    runner.train()
    assert runner.iter == 3
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text()
    assert 'skipped bad sample 1 (in this data-loading process)' in log
    assert runner.train_dataloader.dataset.pipeline.transforms[0].skipped >= 1


def test_empty_split_is_a_clear_error(data_copy, tmp_path):
    empty = data_copy / 'leftImg8bit' / 'val'
    shutil.rmtree(empty)
    empty.mkdir()
    (empty / 'notes.txt').write_text('images went missing')
    with pytest.raises(UserError) as error:
        cfg = load_config(TINY_CONFIG, cfg_options=data_roots(data_copy),
                          work_dir=str(tmp_path / 'w'))
        build_runner(cfg, ['train_dataloader', 'val_dataloader'])
    assert (f"val_dataloader.dataset has no samples: no file ending in '_leftImg8bit.png' under "
            f'{data_copy}/leftImg8bit/val' in str(error.value))


def test_empty_annotation_list_is_a_clear_error(data_copy, tmp_path):
    (data_copy / 'train.txt').write_text('\n\n')
    with pytest.raises(UserError, match='train.txt lists no sample'):
        cfg = load_config(TINY_CONFIG, cfg_options={**data_roots(data_copy),
                                                    'train_dataloader.dataset.ann_file':
                                                    'train.txt'}, work_dir=str(tmp_path / 'w'))
        build_runner(cfg, ['train_dataloader'])
