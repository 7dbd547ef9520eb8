"""End to end: tools/train.py -> checkpoint -> tools/test.py -> --resume, distributed on gloo,
CPU autocast, and the clear errors for bad input. Tiny model and data (tests/configs/tiny_demo.py);
the training run is conftest's shared ``tiny_trained``. 2-process training through
tools/dist_train.sh is in tests/test_dead_rank.py (its uninterrupted reference run).
"""
import glob
import math
import os
import re
import shutil

import cv2
import numpy as np
import pytest
import torch

from afno_seg.datasets.transforms import BadSampleError
from afno_seg.engine import UserError
from afno_seg.engine import run_tool as run_in_process

from conftest import (
    TINY_CONFIG,
    check,
    cli_options,
    data_roots,
    load_script,
    metrics_of,
    run_tool,
)


def data_options(root):
    return cli_options(data_roots(root))


@pytest.fixture(scope='module')
def train_tool():
    return load_script('tools/train.py')


@pytest.fixture(scope='module')
def tested(tiny_trained, tiny_demo_data, tmp_path_factory):
    """tools/test.py on the shared run's iter_6.pth, overlays saved: (work_dir, output)."""
    work_dir = tmp_path_factory.mktemp('tested')
    result = check(run_tool('tools/test.py', TINY_CONFIG,
                            str(tiny_trained.work_dir / 'iter_6.pth'), '--work-dir', str(work_dir),
                            '--show-dir', 'vis', *data_options(tiny_demo_data)))
    return work_dir, result.stdout + result.stderr


def test_train_writes_checkpoints(tiny_trained):
    work_dir = tiny_trained.work_dir
    assert (work_dir / 'last_checkpoint').read_text().strip().endswith('iter_6.pth')
    checkpoint = torch.load(work_dir / 'iter_6.pth', weights_only=False)
    assert checkpoint['meta']['iter'] == 6
    assert 'optimizer' in checkpoint and 'param_schedulers' in checkpoint


def per_class_table(log: str) -> dict[str, tuple[float, float]]:
    """mmseg's IoUMetric table in a log: class -> (IoU, Acc) in percent (nan: class absent)."""
    rows = re.findall(r'^\|\s*([a-z][a-z ]*?)\s*\|\s*(nan|[\d.]+)\s*\|\s*(nan|[\d.]+)\s*\|$',
                      log, flags=re.MULTILINE)
    return {name: (float(iou), float(acc)) for name, iou, acc in rows}


def test_test_tool_reports_per_class_iou(tested):
    work_dir, log = tested
    table = per_class_table(log)
    assert list(table)[:3] == ['road', 'sidewalk', 'building'] and len(table) == 19
    ious = [iou for iou, _ in table.values() if not math.isnan(iou)]
    assert ious and all(0.0 <= iou <= 100.0 for iou in ious)
    # mIoU is the mean over the classes present: the per-class values are the ones it came from
    mean = metrics_of(str(work_dir))['mIoU']
    assert sum(ious) / len(ious) == pytest.approx(mean, abs=0.01)
    overlays = glob.glob(str(work_dir / 'vis' / 'vis_data' / 'vis_image' / '*.png'))
    assert len(overlays) == 4  # every val image


def test_resume_continues_like_an_uninterrupted_run(tiny_trained, tiny_demo_data, tmp_path):
    """Resume from iter_3: iterations 4-6 run, and give bit for bit the weights and optimizer
    state of the run that never stopped. (A restart from scratch ends with the same weights too,
    fixed seed and no dropout: the iterations it runs tell the two apart.)"""
    shutil.copy(tiny_trained.work_dir / 'iter_3.pth', tmp_path / 'iter_3.pth')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_3.pth'))
    result = check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path),
                            '--resume', *data_options(tiny_demo_data)))
    output = result.stdout + result.stderr
    assert 'resumed epoch: 0, iter: 3' in output
    assert re.findall(r'Iter\(train\) \[\s*(\d+)/6\]', output) == ['4', '5', '6']
    resumed = torch.load(tmp_path / 'iter_6.pth', weights_only=False)
    original = torch.load(tiny_trained.work_dir / 'iter_6.pth', weights_only=False)
    assert resumed['meta']['iter'] == 6
    assert resumed['state_dict'].keys() == original['state_dict'].keys()
    for key, value in original['state_dict'].items():
        assert torch.equal(resumed['state_dict'][key], value), key
    for index, state in original['optimizer']['state'].items():
        for name, value in state.items():
            assert torch.equal(resumed['optimizer']['state'][index][name], value), (index, name)


def test_amp_config_trains_on_cpu_with_bfloat16(train_tool, tiny_demo_data, tmp_path):
    """--amp --precision bf16 on a CPU: AmpOptimWrapper (CUDA only) becomes bfloat16 CPU autocast,
    and the training forward's convolutions and linear layers do compute in bfloat16."""
    dtypes = []

    def record(module, args, output):
        if module.training and isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            dtypes.append(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        train_tool.main([TINY_CONFIG, '--work-dir', str(tmp_path), '--amp', '--precision', 'bf16',
                         *data_options(tiny_demo_data), 'train_cfg.max_iters=2',
                         'train_cfg.val_interval=100'])
    finally:
        handle.remove()
    assert torch.load(tmp_path / 'iter_2.pth', weights_only=False)['meta']['iter'] == 2
    dumped = (tmp_path / os.path.basename(TINY_CONFIG)).read_text()  # the config it ran
    assert "type='CPUAutocastOptimWrapper'" in dumped and "dtype='bfloat16'" in dumped
    assert dtypes and set(dtypes) == {torch.bfloat16}, sorted(set(map(str, dtypes)))


@pytest.mark.slow
def test_two_process_gloo_test_matches_single_process(tiny_trained, tested, tiny_demo_data,
                                                      tmp_path):
    checkpoint = str(tiny_trained.work_dir / 'iter_6.pth')
    check(run_tool('tools/dist_test.sh', TINY_CONFIG, checkpoint, '2', '--work-dir', str(tmp_path),
                   *data_options(tiny_demo_data), env={'PORT': '29611'}))
    single, _ = tested
    assert metrics_of(str(tmp_path))['mIoU'] == pytest.approx(metrics_of(str(single))['mIoU'],
                                                              abs=1e-6)


def test_missing_data_root_fails_at_once(tmp_path):
    """The process: a UserError is its message alone on stderr, exit status 1, no traceback."""
    result = run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(tmp_path),
                      *data_options(tmp_path / 'no_cityscapes_here'))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert result.stderr.startswith('error: '), result.stderr[-3000:]
    for fragment in ('no_cityscapes_here', 'leftImg8bit', 'make demo'):
        assert fragment in result.stderr, result.stderr[-3000:]


def test_unknown_mixer_is_named(train_tool, tiny_demo_data, tmp_path):
    with pytest.raises(UserError) as error:
        train_tool.main([TINY_CONFIG, '--work-dir', str(tmp_path), *data_options(tiny_demo_data),
                         'model.backbone.mixers.type=AFNO'])
    assert "model.backbone.mixers.type='AFNO'" in str(error.value)
    assert 'AFNOMixer' in str(error.value)


@pytest.mark.parametrize('damage', ['truncate', 'text'])
def test_bad_checkpoint_is_named(tiny_trained, tiny_demo_data, tmp_path, capsys, damage):
    """tools/test.py on a damaged file: one line naming it, from the loader the Runner reads it
    with (tests/test_inference.py runs inference on a bad file)."""
    bad = tmp_path / 'bad.pth'
    data = (tiny_trained.work_dir / 'iter_6.pth').read_bytes()
    bad.write_bytes(data[:len(data) // 2] if damage == 'truncate' else b'hello')
    main = load_script('tools/test.py').main
    assert run_in_process(lambda: main([TINY_CONFIG, str(bad), '--work-dir', str(tmp_path / 'w'),
                                        *data_options(tiny_demo_data)])) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search('bad.pth.*not a readable', err), err


def test_label_outside_classes_names_the_file(train_tool, tiny_demo_data, tmp_path):
    data = tmp_path / 'data'
    shutil.copytree(tiny_demo_data, data)
    label = sorted(glob.glob(str(data / 'gtFine' / 'train' / '*' / '*_labelTrainIds.png')))[0]
    seg = cv2.imread(label, cv2.IMREAD_UNCHANGED)
    seg[:4, :4] = 33
    cv2.imwrite(label, seg.astype(np.uint8))
    with pytest.raises(BadSampleError) as error:
        train_tool.main([TINY_CONFIG, '--work-dir', str(tmp_path / 'w'), *data_options(data)])
    assert os.path.basename(label) in str(error.value) and '33' in str(error.value)
