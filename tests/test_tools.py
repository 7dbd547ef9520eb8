"""End to end: tools/train.py -> checkpoint -> tools/test.py -> --resume, distributed on gloo,
CPU autocast, and the clear errors for bad input. Tiny model and data (tests/configs/tiny_demo.py).
"""
import glob
import os
import shutil

import cv2
import numpy as np
import pytest
import torch

from conftest import TINY_CONFIG, check, metrics_of, run_tool


def data_options(root):
    root = str(root) + '/'
    return ['--cfg-options'] + [f'{loader}.dataset.data_root={root}'
                                for loader in ('train_dataloader', 'val_dataloader',
                                               'test_dataloader')]


def weights(path):
    return torch.load(path, map_location='cpu', weights_only=False)['state_dict']


@pytest.fixture(scope='module')
def trained(tiny_demo_data, tmp_path_factory):
    """One uninterrupted 6-iteration run saving iter_3 and iter_6."""
    work_dir = str(tmp_path_factory.mktemp('train'))
    check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', work_dir,
                   *data_options(tiny_demo_data)))
    return work_dir


def test_train_writes_checkpoints(trained):
    with open(os.path.join(trained, 'last_checkpoint')) as f:
        assert f.read().strip().endswith('iter_6.pth')
    checkpoint = torch.load(os.path.join(trained, 'iter_6.pth'), weights_only=False)
    assert checkpoint['meta']['iter'] == 6
    assert 'optimizer' in checkpoint and 'param_schedulers' in checkpoint


def test_test_tool_reports_per_class_iou(trained, tiny_demo_data, tmp_path):
    result = check(run_tool('tools/test.py', TINY_CONFIG, os.path.join(trained, 'iter_6.pth'),
                            '--work-dir', str(tmp_path), '--show-dir', 'vis',
                            *data_options(tiny_demo_data)))
    log = result.stdout + result.stderr
    for name in ('road', 'sky', 'car', 'mIoU'):
        assert name in log
    assert 0.0 <= metrics_of(str(tmp_path))['mIoU'] <= 100.0
    overlays = glob.glob(str(tmp_path / 'vis' / 'vis_data' / 'vis_image' / '*.png'))
    assert len(overlays) == 4  # every val image


def test_resume_continues_like_an_uninterrupted_run(trained, tiny_demo_data, tmp_path):
    """Resume from iter_3: iterations 4-6 give the same weights as the run that never stopped."""
    shutil.copy(os.path.join(trained, 'iter_3.pth'), tmp_path / 'iter_3.pth')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_3.pth'))
    result = check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path),
                            '--resume', *data_options(tiny_demo_data)))
    assert 'resumed' in (result.stdout + result.stderr).lower()
    resumed = torch.load(tmp_path / 'iter_6.pth', weights_only=False)
    original = torch.load(os.path.join(trained, 'iter_6.pth'), weights_only=False)
    assert resumed['meta']['iter'] == 6
    for key, value in original['state_dict'].items():
        torch.testing.assert_close(resumed['state_dict'][key], value, rtol=1e-5, atol=1e-6)
    step = original['optimizer']['state'][0]['step']
    assert resumed['optimizer']['state'][0]['step'] == step


def test_amp_config_trains_on_cpu_with_bfloat16(tiny_demo_data, tmp_path):
    result = check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path), '--amp',
                            *data_options(tiny_demo_data), 'train_cfg.max_iters=2',
                            'train_cfg.val_interval=100'))
    assert 'CPUAutocastOptimWrapper' in result.stdout + result.stderr


@pytest.mark.slow
def test_two_process_gloo_train_and_test_match_single_process(trained, tiny_demo_data, tmp_path):
    checkpoint = os.path.join(trained, 'iter_6.pth')
    single, double = tmp_path / 'single', tmp_path / 'double'
    check(run_tool('tools/test.py', TINY_CONFIG, checkpoint, '--work-dir', str(single),
                   *data_options(tiny_demo_data)))
    check(run_tool('tools/dist_test.sh', TINY_CONFIG, checkpoint, '2', '--work-dir', str(double),
                   *data_options(tiny_demo_data), env={'PORT': '29611'}))
    assert metrics_of(str(double))['mIoU'] == pytest.approx(metrics_of(str(single))['mIoU'],
                                                            abs=1e-6)
    train_dir = tmp_path / 'dist_train'
    result = check(run_tool('tools/dist_train.sh', TINY_CONFIG, '2', '--work-dir', str(train_dir),
                            *data_options(tiny_demo_data), 'train_cfg.max_iters=3',
                            'train_cfg.val_interval=100', env={'PORT': '29612'}))
    assert 'gloo' in result.stdout + result.stderr
    state = weights(train_dir / 'iter_3.pth')
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def expect_error(result, *fragments):
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr[-3000:]


def test_missing_data_root_fails_at_once(tmp_path):
    expect_error(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path),
                          *data_options(tmp_path / 'no_cityscapes_here')),
                 'no_cityscapes_here', 'leftImg8bit', 'make demo')


def test_unknown_mixer_is_named(tiny_demo_data, tmp_path):
    expect_error(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path),
                          *data_options(tiny_demo_data), 'model.backbone.mixers.type=AFNO'),
                 "model.backbone.mixers.type='AFNO'", 'AFNOMixer')


@pytest.mark.parametrize('damage', ['truncate', 'text'])
def test_bad_checkpoint_is_named(trained, tiny_demo_data, tmp_path, damage):
    bad = tmp_path / 'bad.pth'
    data = open(os.path.join(trained, 'iter_6.pth'), 'rb').read()
    bad.write_bytes(data[:len(data) // 2] if damage == 'truncate' else b'hello')
    expect_error(run_tool('tools/test.py', TINY_CONFIG, str(bad), '--work-dir', str(tmp_path),
                          *data_options(tiny_demo_data)), 'bad.pth', 'not a readable')


def test_label_outside_classes_names_the_file(tiny_demo_data, tmp_path):
    data = tmp_path / 'data'
    shutil.copytree(tiny_demo_data, data)
    label = sorted(glob.glob(str(data / 'gtFine' / 'train' / '*' / '*_labelTrainIds.png')))[0]
    seg = cv2.imread(label, cv2.IMREAD_UNCHANGED)
    seg[:4, :4] = 33
    cv2.imwrite(label, seg.astype(np.uint8))
    expect_error(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path / 'w'),
                          *data_options(data)), os.path.basename(label), '33')
