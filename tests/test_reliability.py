"""Reliability: kill/resume, atomic checkpoints, full disk / unwritable work_dir, bad data, NaN/Inf.

Fast tests build Runners in this process on the tiny config (tests/configs/tiny_demo.py); the
`slow` ones run tools/train.py as a subprocess: SIGKILLed again and again (also half-way through
a checkpoint write), or with a disk that fills up during a save. docs/reliability.md quotes the
numbers and messages these tests produce.
"""
import errno
import glob
import inspect
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from mmengine.hooks import Hook
from mmengine.logging import MessageHub
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper
from mmengine.registry import HOOKS, init_default_scope
from torch import nn

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.datasets import transforms as seg_transforms
from afno_seg.datasets.transforms import BadSampleError
from afno_seg.engine import (
    AtomicLocalBackend,
    DiskSpaceError,
    EmptySplitError,
    NonFiniteLossError,
    NonFiniteLossHook,
    SaveError,
    WorkDirError,
    atomic_io,
    atomic_write,
    build_runner,
    checkpoint_hook,
    estimate_checkpoint_bytes,
    load_config,
    remove_stale_temp_files,
)
from afno_seg.mixers.catalogue import is_spectral, mixer_classes

from conftest import ROOT, TINY_CONFIG, run_tool

LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def data_roots(root) -> dict:
    return {f'{loader}.dataset.data_root': str(root) + '/' for loader in LOADERS}


def cli_options(options: dict) -> list:
    return ['--cfg-options'] + [f'{key}={value}' for key, value in options.items()]


_runner_count = 0


def make_runner(data_root, work_dir, config=TINY_CONFIG, **options):
    """A Runner built the way tools/train.py builds it: unique experiment name, no validation
    unless ``options`` set ``val_cfg`` etc. back."""
    global _runner_count
    _runner_count += 1
    no_validation = {'val_cfg': None, 'val_dataloader': None, 'val_evaluator': None}
    options = {**data_roots(data_root), **no_validation,
               'experiment_name': f'reliability_{os.getpid()}_{_runner_count}', **options}
    cfg = load_config(config, cfg_options=options, work_dir=str(work_dir))
    return build_runner(cfg, ['train_dataloader'])


def read_checkpoint(path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)


def assert_same_training_state(ours: dict, reference: dict) -> None:
    """Bitwise: weights, optimizer state, schedulers, iteration and the torch generator."""
    assert ours['meta']['iter'] == reference['meta']['iter']
    for key, value in reference['state_dict'].items():
        assert torch.equal(ours['state_dict'][key], value), key
    for index, slots in reference['optimizer']['state'].items():
        for name, value in slots.items():
            assert torch.equal(torch.as_tensor(ours['optimizer']['state'][index][name]),
                               torch.as_tensor(value)), (index, name)
    assert ours['param_schedulers'] == reference['param_schedulers']
    assert torch.equal(ours['rng_state']['torch'], reference['rng_state']['torch'])


# --------------------------------------------------------------------------- atomic writes

def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / 'sub' / 'file.bin'
    atomic_write(b'first', target)
    atomic_write('second', target)
    assert target.read_bytes() == b'second'
    assert os.listdir(target.parent) == ['file.bin']  # no temporary file left


def test_failed_write_keeps_previous_file_and_names_path(tmp_path, monkeypatch):
    target = tmp_path / 'iter_4.pth'
    atomic_write(b'complete checkpoint', target)

    def disk_full(file, data, path):
        file.write(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic_io, '_write_all', disk_full)
    with pytest.raises(SaveError) as error:
        atomic_write(b'x' * 4000, target)
    message = str(error.value)
    assert str(target) in message and 'No space left on device' in message
    assert 'previous iter_4.pth is intact' in message
    assert target.read_bytes() == b'complete checkpoint'
    assert os.listdir(tmp_path) == ['iter_4.pth']


def test_stale_temp_files_of_killed_saves_are_removed(tmp_path):
    stale = tmp_path / '.iter_6.pth.12345.0badc0de.tmp'
    own = tmp_path / f'.iter_8.pth.{os.getpid()}.0badc0de.tmp'
    unrelated = tmp_path / '.hidden.tmp'
    for path in (stale, own, unrelated):
        path.write_bytes(b'partial')
    assert remove_stale_temp_files(tmp_path) == [str(stale)]
    assert own.exists() and unrelated.exists()


def test_mmengine_saves_through_the_atomic_backend(tmp_path, monkeypatch):
    from mmengine.fileio import get_file_backend
    from mmengine.runner.checkpoint import save_checkpoint
    assert isinstance(get_file_backend(str(tmp_path / 'x.pth')), AtomicLocalBackend)
    written = []

    def record(file, data, path):
        written.append(path)
        file.write(data)

    monkeypatch.setattr(atomic_io, '_write_all', record)
    save_checkpoint({'state_dict': {'w': torch.ones(2)}}, str(tmp_path / 'iter_1.pth'))
    assert written == [str(tmp_path / 'iter_1.pth')]
    assert torch.equal(read_checkpoint(tmp_path / 'iter_1.pth')['state_dict']['w'], torch.ones(2))


def test_atomic_backend_replaces_a_local_backend_cached_before_the_import():
    code = ('from mmengine.fileio import get_file_backend; get_file_backend("/x.pth"); '
            'import afno_seg; print(type(get_file_backend("/x.pth")).__name__)')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert result.stdout.strip() == 'AtomicLocalBackend', result.stderr[-2000:]


@pytest.mark.parametrize('hook_type', ['CheckpointHook', 'AtomicCheckpointHook'])
def test_failed_save_with_max_keep_one_keeps_the_previous_checkpoint(
        tiny_demo_data, tmp_path, monkeypatch, hook_type):
    """mmengine deletes the kept checkpoint BEFORE writing its successor; ours after."""
    def fail_on_iter_4(file, data, path):
        if path.endswith('iter_4.pth'):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        file.write(data)

    monkeypatch.setattr(atomic_io, '_write_all', fail_on_iter_4)
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 4, 'default_hooks.checkpoint.type': hook_type,
        'default_hooks.checkpoint.interval': 2, 'default_hooks.checkpoint.max_keep_ckpts': 1})
    with pytest.raises(SaveError, match='iter_4.pth'):
        runner.train()
    named = (tmp_path / 'last_checkpoint').read_text().strip()
    assert named.endswith('iter_2.pth')
    if hook_type == 'CheckpointHook':
        assert not os.path.exists(named)  # stock mmengine: --resume has nothing to resume from
    else:
        assert read_checkpoint(named)['meta']['iter'] == 2
    assert not glob.glob(str(tmp_path / '.*.tmp'))


# --------------------------------------------------------------------------- work_dir and disk

def test_unwritable_work_dir_fails_before_building(tiny_demo_data, tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    with pytest.raises(WorkDirError) as error:
        make_runner(tiny_demo_data, blocker / 'work_dir')
    assert f'work_dir {blocker / "work_dir"} is not writable' in str(error.value)
    assert 'Not a directory' in str(error.value) and '--work-dir' in str(error.value)


def test_unwritable_work_dir_message_from_the_tool(tiny_demo_data, tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    result = run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(blocker / 'w'),
                      *cli_options(data_roots(tiny_demo_data)))
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    assert f'error: work_dir {blocker / "w"} is not writable' in result.stderr


def test_checkpoint_size_estimate_bounds_the_real_size(tiny_demo_data, tmp_path):
    runner = make_runner(tiny_demo_data, tmp_path, **{'train_cfg.max_iters': 1})
    runner.train()
    actual = os.path.getsize(tmp_path / 'iter_1.pth')
    estimate = estimate_checkpoint_bytes(runner.model, runner.optim_wrapper)
    assert actual <= estimate['total'] <= actual + estimate['overhead']
    assert estimate['optimizer'] == 2 * sum(p.numel() * 4 for p in runner.model.parameters())


def test_too_little_free_space_fails_before_the_first_iteration(tiny_demo_data, tmp_path,
                                                                monkeypatch):
    monkeypatch.setattr(checkpoint_hook, 'free_bytes', lambda folder: 1_000_000)
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook'})
    with pytest.raises(DiskSpaceError) as error:
        runner.train()
    message = str(error.value)
    assert f'not enough free space in {tmp_path}' in message
    assert 'one checkpoint needs about' in message and '1.0 MB free' in message
    assert runner.iter == 0 and not glob.glob(str(tmp_path / 'iter_*.pth'))


# --------------------------------------------------------------------------- random state

@pytest.mark.slow
def test_resume_restores_random_state_bitwise(tiny_demo_data, tmp_path):
    """Drop-path and dropout on: without RandomStateHook a resumed run diverges; with it, not."""
    cfg = load_config(TINY_CONFIG)
    cfg.val_dataloader.dataset.data_root = str(tiny_demo_data) + '/'
    options = {'model.backbone.drop_path_rate': 0.1, 'model.decode_head.dropout_ratio': 0.1,
               'train_cfg.max_iters': 4, 'train_cfg.val_interval': 2,
               'val_cfg': cfg.val_cfg, 'val_dataloader': cfg.val_dataloader,
               'val_evaluator': cfg.val_evaluator,
               'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
               'default_hooks.checkpoint.interval': 2,
               'custom_hooks': [dict(type='RandomStateHook')]}
    make_runner(tiny_demo_data, tmp_path / 'ref', **options).train()
    reference = read_checkpoint(tmp_path / 'ref' / 'iter_4.pth')
    for with_hook in (True, False):
        work_dir = tmp_path / f'resumed_{with_hook}'
        work_dir.mkdir()
        shutil.copy(tmp_path / 'ref' / 'iter_2.pth', work_dir / 'iter_2.pth')
        (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_2.pth'))
        hooks = options['custom_hooks'] if with_hook else []
        make_runner(tiny_demo_data, work_dir, resume=True,
                    **{**options, 'custom_hooks': hooks}).train()
        resumed = read_checkpoint(work_dir / 'iter_4.pth')
        same = all(torch.equal(resumed['state_dict'][k], v)
                   for k, v in reference['state_dict'].items())
        assert same == with_hook
        if with_hook:
            assert_same_training_state(resumed, reference)


# --------------------------------------------------------------------------- kill and resume

SEAMS = '''
"""Test seam imported through custom_imports: slow or failing checkpoint writes."""
import errno, os, time
from afno_seg.engine import atomic_io

DELAY = float(os.environ.get('AFNO_TEST_SAVE_DELAY', '0'))
FAIL = os.environ.get('AFNO_TEST_FAIL_SAVE', '')


def _write_all(file, data, path):
    if FAIL and path.endswith(FAIL):
        file.write(data[:len(data) // 2])
        file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if DELAY and path.endswith('.pth'):  # 16 chunks: a kill lands half-way through the file
        step = -(-len(data) // 16)
        for start in range(0, len(data), step):
            file.write(data[start:start + step])
            file.flush()
            time.sleep(DELAY / 16)
    else:
        file.write(data)


atomic_io._write_all = _write_all
'''


def write_seamed_config(folder: Path, max_iters: int, **lines: str) -> str:
    """A config over tiny_demo with the reliability hooks and the test seam imported."""
    (folder / 'reliability_seams.py').write_text(SEAMS)
    extra = '\n'.join(f'{key} = {value}' for key, value in lines.items())
    config = folder / 'reliability_config.py'
    config.write_text(textwrap.dedent(f'''
        _base_ = [{TINY_CONFIG!r}]
        custom_imports = dict(imports=['afno_seg', 'reliability_seams'],
                              allow_failed_imports=False)
        train_cfg = dict(max_iters={max_iters}, val_interval=100)
        param_scheduler = [
            dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=2),
            dict(type='PolyLR', eta_min=0.0, power=1.0, begin=2, end={max_iters}, by_epoch=False)
        ]
        custom_hooks = [dict(type='RandomStateHook'), dict(type='NonFiniteLossHook')]
        ''') + extra + '\n')
    return str(config)


def seam_env(folder: Path, **variables) -> dict:
    return dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1',
                PYTHONPATH=os.pathsep.join([str(folder), os.environ.get('PYTHONPATH', '')]),
                **variables)


def complete_checkpoint_named_by(work_dir: Path) -> int:
    """Check the work_dir a kill left: returns the iteration ``last_checkpoint`` names (0: none).

    Every visible ``iter_*.pth`` must load completely and ``last_checkpoint`` must name one.
    """
    for path in glob.glob(str(work_dir / 'iter_*.pth')):
        checkpoint = read_checkpoint(path)  # raises on a truncated file
        assert checkpoint['meta']['iter'] == int(re.search(r'iter_(\d+)', path)[1])
    last = work_dir / 'last_checkpoint'
    if not last.exists():
        return 0
    named = last.read_text().strip()
    assert os.path.isfile(named), f'last_checkpoint names {named!r}, which does not exist'
    return read_checkpoint(named)['meta']['iter']


def wait_for(condition, process, timeout=180.0) -> bool:
    """Poll ``condition`` every 5 ms; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    raise TimeoutError('training made no progress')


KILL_CYCLES = 8
KILL_MAX_ITERS = 20


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_matches_uninterrupted_run(tiny_demo_data,
                                                                         tmp_path):
    """8 SIGKILLs (half of them while a checkpoint is half-written), a --resume after each:
    every resume starts at the last complete checkpoint, and the run ends bitwise equal to one
    that was never interrupted (weights, AdamW moments, schedulers, torch generator)."""
    config = write_seamed_config(
        tmp_path, KILL_MAX_ITERS,
        model="dict(backbone=dict(drop_path_rate=0.1), decode_head=dict(dropout_ratio=0.1))",
        default_hooks="dict(checkpoint=dict(type='AtomicCheckpointHook', interval=2, "
                      "max_keep_ckpts=2))")
    command = [sys.executable, 'tools/train.py', config, '--resume',
               *cli_options(data_roots(tiny_demo_data))]

    reference_dir = tmp_path / 'uninterrupted'
    result = subprocess.run(command + ['--work-dir', str(reference_dir)], cwd=ROOT, timeout=600,
                            env=seam_env(tmp_path), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]

    work_dir = tmp_path / 'killed'
    work_dir.mkdir()
    rng = random.Random(8)
    env = seam_env(tmp_path, AFNO_TEST_SAVE_DELAY='0.8')
    resumed_from, mid_write_kills, finished = [], 0, False
    expected_start = 0
    for cycle in range(KILL_CYCLES):
        log_path = tmp_path / f'cycle_{cycle}.log'
        with open(log_path, 'w') as log:
            process = subprocess.Popen(command + ['--work-dir', str(work_dir)], cwd=ROOT,
                                       env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            if cycle % 2 == 0:  # kill while the n-th checkpoint of this process is being written
                nth, seen = rng.choice([1, 2]), set()
                own_temp = str(work_dir / f'.iter_*.pth.{process.pid}.*.tmp')

                def nth_save_started():
                    seen.update(glob.glob(own_temp))
                    return len(seen) >= nth

                alive = wait_for(nth_save_started, process)
                delay = rng.uniform(0.0, 0.5)
            else:  # kill at a random moment after a random number of new iterations
                target = expected_start + rng.randint(3, 6)

                def reached_target():
                    done = re.findall(r'Iter\(train\) \[\s*(\d+)/', log_path.read_text())
                    return bool(done) and int(done[-1]) >= target

                alive = wait_for(reached_target, process)
                delay = rng.uniform(0.0, 0.4)
            if alive:
                time.sleep(delay)
            partial = glob.glob(str(work_dir / f'.iter_*.pth.{process.pid}.*.tmp'))
            killed = process.poll() is None
        finally:
            process.kill()
            process.wait()
        text = log_path.read_text()
        match = re.search(r'resumed epoch: \d+, iter: (\d+)', text)
        resumed_from.append(int(match[1]) if match else 0)
        assert resumed_from[-1] == expected_start, text[-3000:]
        expected_start = complete_checkpoint_named_by(work_dir)
        mid_write_kills += bool(killed and partial)
        if not killed:  # the run got to its end before this cycle's kill
            finished = process.returncode == 0
            assert finished, text[-3000:]
            break

    if not finished:
        final_log = tmp_path / 'final.log'
        result = subprocess.run(command + ['--work-dir', str(work_dir)], cwd=ROOT, timeout=600,
                                env=seam_env(tmp_path), capture_output=True, text=True)
        final_log.write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stderr[-3000:]
        match = re.search(r'resumed epoch: \d+, iter: (\d+)', result.stdout + result.stderr)
        assert int(match[1]) == expected_start
        resumed_from.append(expected_start)
    print(f'kill cycles: {KILL_CYCLES}, killed mid-write: {mid_write_kills}, '
          f'resumed from iterations: {resumed_from}')
    assert mid_write_kills >= 2 and len(set(resumed_from)) >= 4
    assert not glob.glob(str(work_dir / '.*.tmp'))  # the next run cleared the partial files
    assert_same_training_state(read_checkpoint(work_dir / f'iter_{KILL_MAX_ITERS}.pth'),
                               read_checkpoint(reference_dir / f'iter_{KILL_MAX_ITERS}.pth'))


@pytest.mark.slow
def test_disk_full_during_save_names_the_file_and_keeps_the_previous(tiny_demo_data, tmp_path):
    config = write_seamed_config(
        tmp_path, 4, default_hooks="dict(checkpoint=dict(type='AtomicCheckpointHook', "
                                   "interval=2, max_keep_ckpts=1))")
    work_dir = tmp_path / 'work'
    result = subprocess.run(
        [sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir),
         *cli_options(data_roots(tiny_demo_data))], cwd=ROOT, timeout=600, capture_output=True,
        text=True, env=seam_env(tmp_path, AFNO_TEST_FAIL_SAVE='iter_4.pth'))
    assert result.returncode == 1, result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    assert (f'error: could not write {work_dir / "iter_4.pth"}' in result.stderr
            and 'No space left on device [errno 28]' in result.stderr)
    assert complete_checkpoint_named_by(work_dir) == 2
    assert sorted(os.listdir(work_dir)) == sorted(
        ['iter_2.pth', 'last_checkpoint', 'reliability_config.py'] +
        [name for name in os.listdir(work_dir) if re.fullmatch(r'\d{8}_\d{6}', name)])


# --------------------------------------------------------------------------- bad data

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


def test_skip_mode_stops_after_max_skipped(data_copy):
    dataset = build_dataset(data_copy, on_bad='skip', max_skipped=1)
    for index in (0, 1):
        _truncate(dataset.get_data_info(index)['img_path'])
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
    with pytest.raises(EmptySplitError) as error:
        cfg = load_config(TINY_CONFIG, cfg_options=data_roots(data_copy),
                          work_dir=str(tmp_path / 'w'))
        build_runner(cfg, ['train_dataloader', 'val_dataloader'])
    assert (f"val_dataloader.dataset has no samples: no file ending in '_leftImg8bit.png' under "
            f'{data_copy}/leftImg8bit/val' in str(error.value))


def test_empty_annotation_list_is_a_clear_error(data_copy, tmp_path):
    (data_copy / 'train.txt').write_text('\n\n')
    with pytest.raises(EmptySplitError, match='train.txt lists no sample'):
        cfg = load_config(TINY_CONFIG, cfg_options={**data_roots(data_copy),
                                                    'train_dataloader.dataset.ann_file':
                                                    'train.txt'}, work_dir=str(tmp_path / 'w'))
        build_runner(cfg, ['train_dataloader'])


# --------------------------------------------------------------------------- numerics

@HOOKS.register_module(force=True)
class PoisonWeightHook(Hook):
    """Test only: before iteration ``at``, set one weight to +inf."""

    def __init__(self, parameter: str, at: int) -> None:
        self.parameter, self.at = parameter, at

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.at:
            with torch.no_grad():
                runner.model.get_parameter(self.parameter).fill_(float('inf'))


def test_non_finite_loss_stops_naming_iteration_and_module(tiny_demo_data, tmp_path):
    mixer = 'backbone.layers.1.1.0.attn'
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
        'default_hooks.checkpoint.interval': 2,
        'custom_hooks': [dict(type='NonFiniteLossHook'),
                         dict(type='PoisonWeightHook', parameter=f'{mixer}.w1', at=3)]})
    with pytest.raises(NonFiniteLossError) as error:
        runner.train()
    message = str(error.value)
    assert message.startswith('non-finite loss at iteration 3 (decode.loss_ce=nan')
    assert f'the first module with a non-finite output is {mixer} (AFNOMixer)' in message
    assert f'the last checkpoint is {tmp_path / "iter_2.pth"}' in message
    # Stopped before the optimizer step: only the poisoned weight is not finite.
    for name, parameter in runner.model.named_parameters():
        assert torch.isfinite(parameter).all() or name == f'{mixer}.w1', name
    assert sorted(os.listdir(tmp_path)).count('iter_2.pth') == 1
    assert not glob.glob(str(tmp_path / 'iter_4.pth'))


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.factor = 1.0

    def forward(self, x):
        return x * self.factor


class ToyModel(BaseModel):
    """conv -> scale -> BN -> head; ``scale.factor = inf`` makes the loss non-finite."""

    def __init__(self):
        super().__init__()
        self.conv, self.scale = nn.Conv2d(3, 4, 1), Scale()
        self.bn, self.head = nn.BatchNorm2d(4), nn.Conv2d(4, 1, 1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.head(self.bn(self.scale(self.conv(inputs))))
        return dict(loss=out.square().mean()) if mode == 'loss' else out


class CPUScaledOptimWrapper(OptimWrapper):
    """AmpOptimWrapper's loss-scaling logic on a CPU GradScaler (AmpOptimWrapper needs CUDA)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loss_scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)

    def backward(self, loss, **kwargs):
        self.loss_scaler.scale(loss).backward(**kwargs)
        self._inner_count += 1

    def step(self, **kwargs):
        self.loss_scaler.step(self.optimizer, **kwargs)
        self.loss_scaler.update()


def toy_setup(scaled: bool, **hook_args):
    torch.manual_seed(0)
    model = ToyModel()
    wrapper_type = CPUScaledOptimWrapper if scaled else OptimWrapper
    wrapper = wrapper_type(optimizer=torch.optim.AdamW(model.parameters(), lr=0.1))
    warnings = []
    runner = SimpleNamespace(model=model, optim_wrapper=wrapper, iter=0,
                             logger=SimpleNamespace(warning=warnings.append),
                             message_hub=MessageHub.get_instance('reliability_toy'))
    hook = NonFiniteLossHook(**hook_args)
    hook.before_train(runner)
    batch = dict(inputs=torch.randn(2, 3, 5, 6))
    return model, wrapper, runner, hook, batch, warnings


def test_non_finite_loss_without_scaler_raises_before_the_step():
    model, wrapper, runner, hook, batch, _ = toy_setup(scaled=False)
    model.train_step(batch, wrapper)
    runner.iter = 1
    model.scale.factor = float('inf')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match=r'iteration 2 \(loss=nan\): the first module '
                                                 r'with a non-finite output is scale \(Scale\)'):
        model.train_step(batch, wrapper)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()
               if not k.startswith('bn.'))  # BN may have seen the batch; weights did not move


def test_non_finite_input_batch_is_named():
    model, wrapper, runner, hook, batch, _ = toy_setup(scaled=False)
    batch['inputs'][0, 0, 0, 0] = float('nan')
    with pytest.raises(NonFiniteLossError, match='the input batch itself holds NaN/Inf'):
        model.train_step(batch, wrapper)


def test_loss_scaler_skips_non_finite_steps_then_gives_up():
    model, wrapper, runner, hook, batch, warnings = toy_setup(scaled=True,
                                                              max_skipped_in_a_row=2)

    def train_iteration():  # what IterBasedTrainLoop.run_iter does around the hook
        model.train_step(batch, wrapper)
        hook.after_train_iter(runner, runner.iter)
        runner.iter += 1

    train_iteration()
    scale = wrapper.loss_scaler.get_scale()
    model.scale.factor = float('inf')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_iteration()  # skipped: weights AND BatchNorm statistics unchanged
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert wrapper.loss_scaler.get_scale() == scale / 2
    assert len(warnings) == 1 and 'non-finite loss at iteration 2' in warnings[0]
    assert 'scale (Scale)' in warnings[0] and 'skips this optimizer step (1 in a row' in warnings[0]
    model.scale.factor = 1.0
    train_iteration()  # a finite step resets the streak and moves the weights
    assert hook.skipped_in_a_row == 0
    assert not torch.equal(model.conv.weight, before['conv.weight'])
    model.scale.factor = float('inf')
    train_iteration()
    train_iteration()
    with pytest.raises(NonFiniteLossError, match='iteration 6'):
        train_iteration()
    assert hook.skipped_total == 3


@pytest.mark.parametrize('token_dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('mixer_cls', mixer_classes(), ids=lambda cls: cls.__name__)
def test_mixers_stay_finite_on_large_dynamic_range_under_bf16_autocast(mixer_cls, token_dtype):
    """Tokens with magnitudes from 1e-4 to 1e4 (log-uniform, random signs) on a 7x10 grid."""
    torch.manual_seed(0)
    height, width, channels = 7, 10, 16
    arguments = dict(embed_dims=channels)
    if 'num_heads' in inspect.signature(mixer_cls).parameters:
        arguments['num_heads'] = 2
    mixer = mixer_cls(**arguments)
    magnitude = torch.exp(torch.empty(2, height * width, channels).uniform_(-9.21, 9.21))
    tokens = magnitude * (torch.randint(0, 2, magnitude.shape) * 2 - 1)
    assert tokens.abs().max() > 5e3 and tokens.abs().min() < 2e-4
    x = tokens.to(token_dtype).requires_grad_(True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = mixer(x, (height, width))
    out.float().square().mean().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters() if p.grad is not None)
    if is_spectral(mixer_cls):  # fp32 islands: as accurate as the token dtype allows
        reference = mixer(x.detach().float(), (height, width))
        error = (out.float() - reference).abs().max() / reference.abs().max()
        assert error < (1e-6 if token_dtype == torch.float32 else 1e-2), float(error)


DISTRIBUTED_NAN = '''
"""Two gloo processes; rank 1's loss turns NaN at iteration 2. Both must stop, neither hang."""
import os, sys
import torch
import torch.distributed as dist
from types import SimpleNamespace
from mmengine.logging import MessageHub
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
sys.path.insert(0, sys.argv[3])
from test_reliability import ToyModel
from afno_seg.engine import NonFiniteLossError, NonFiniteLossHook

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[4]
dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
torch.manual_seed(0)
model = MMDistributedDataParallel(module=ToyModel())
wrapper = OptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
runner = SimpleNamespace(model=model, optim_wrapper=wrapper, iter=0, logger=None,
                         message_hub=MessageHub.get_instance(f'dist_nan_{rank}'))
NonFiniteLossHook().before_train(runner)
batch = dict(inputs=torch.randn(2, 3, 5, 6))
model.train_step(batch, wrapper)
runner.iter = 1
if rank == 1:
    model.module.scale.factor = float('inf')
try:
    model.train_step(batch, wrapper)
    message = 'no error'
except NonFiniteLossError as error:
    message = str(error)
with open(out, 'w') as f:
    f.write(message)
'''


@pytest.mark.slow
def test_distributed_non_finite_loss_stops_every_rank(tmp_path):
    import socket
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    script = tmp_path / 'distributed_nan.py'
    script.write_text(DISTRIBUTED_NAN)
    outputs = [tmp_path / f'rank{rank}.txt' for rank in (0, 1)]
    processes = [subprocess.Popen([sys.executable, str(script), str(rank), str(port),
                                   str(ROOT / 'tests'), str(outputs[rank])], cwd=ROOT,
                                  env=dict(os.environ, OMP_NUM_THREADS='1'),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for rank in (0, 1)]
    for process in processes:
        try:
            process.wait(timeout=180)
        finally:
            process.kill()
    logs = [process.stdout.read().decode()[-2000:] for process in processes]
    assert all(process.returncode == 0 for process in processes), logs
    rank0, rank1 = (path.read_text() for path in outputs)
    assert rank0.startswith('rank 0: non-finite loss at iteration 2 on another rank (here: loss=')
    assert rank1.startswith('rank 1: non-finite loss at iteration 2 (loss=nan): the first module '
                            'with a non-finite output is scale (Scale)')
