"""Checkpoints written atomically: a failed or killed save never replaces or names a partial file,
mmengine's saves go through the atomic backend, a full disk or an unwritable work_dir is one clear
error before (or instead of) a lost checkpoint.

In-process Runners on the tiny config (tests/configs/tiny_demo.py); kills of tools/train.py are in
tests/test_resume.py. docs/reliability.md quotes the messages these tests produce.
"""
import errno
import glob
import os
import re
import subprocess
import sys

import pytest
import torch

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine import (
    AtomicLocalBackend,
    DiskSpaceError,
    SaveError,
    WorkDirError,
    atomic_io,
    atomic_write,
    checkpoint_hook,
    estimate_checkpoint_bytes,
    remove_stale_temp_files,
)

from conftest import (
    TINY_CONFIG,
    cli_options,
    complete_checkpoint_named_by,
    data_roots,
    load_script,
    make_runner,
    read_checkpoint,
)

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
    """mmengine deletes the kept checkpoint BEFORE writing its successor; ours after. Ours names
    the file and the cause (tools print it as one line) and leaves only the complete iter_2."""
    def fail_on_iter_4(file, data, path):
        if path.endswith('iter_4.pth'):
            file.write(data[:len(data) // 2])  # the disk fills up half-way through the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        file.write(data)

    monkeypatch.setattr(atomic_io, '_write_all', fail_on_iter_4)
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 4, 'default_hooks.checkpoint.type': hook_type,
        'default_hooks.checkpoint.interval': 2, 'default_hooks.checkpoint.max_keep_ckpts': 1})
    with pytest.raises(SaveError, match='iter_4.pth') as error:
        runner.train()
    named = (tmp_path / 'last_checkpoint').read_text().strip()
    assert named.endswith('iter_2.pth')
    if hook_type == 'CheckpointHook':
        assert not os.path.exists(named)  # stock mmengine: --resume has nothing to resume from
    else:
        assert (f'could not write {tmp_path / "iter_4.pth"}' in str(error.value)
                and 'No space left on device [errno 28]' in str(error.value))
        assert complete_checkpoint_named_by(tmp_path) == 2
        assert sorted(os.listdir(tmp_path)) == sorted(
            ['iter_2.pth', 'last_checkpoint', os.path.basename(TINY_CONFIG)] +
            [name for name in os.listdir(tmp_path) if re.fullmatch(r'\d{8}_\d{6}', name)])
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
    """tools/train.py's --work-dir reaches the check (its UserError is printed as one line, exit
    status 1: tests/test_tools.py::test_missing_data_root_fails_at_once runs the process)."""
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    train = load_script('tools/train.py')
    with pytest.raises(WorkDirError, match=f'work_dir {blocker / "w"} is not writable'):
        train.main([TINY_CONFIG, '--work-dir', str(blocker / 'w'),
                    *cli_options(data_roots(tiny_demo_data))])


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
