"""Checkpoints written atomically: a failed or killed save never replaces or names a partial file,
the checkpoint hook's saves (best ones too) go through the atomic backend while mmengine's own
'local' backend stays as it is, a full disk or an unwritable work_dir is one clear error instead of
a lost checkpoint.

In-process Runners on the tiny config (tests/configs/tiny_demo.py); kills of tools/train.py are in
tests/test_resume.py. docs/reliability.md quotes the messages these tests produce.
"""
import errno
import glob
import os
import re

import pytest
import torch

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine import (
    SaveError,
    UserError,
    atomic_io,
    atomic_write,
    load_config,
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
    assert '4,000 bytes' in message and 'the previous files are intact' in message
    assert target.read_bytes() == b'complete checkpoint'
    assert os.listdir(tmp_path) == ['iter_4.pth']


def test_stale_temp_files_of_killed_saves_are_removed(tmp_path):
    own = atomic_io.temp_name(tmp_path / 'iter_8.pth')  # this (live) process's
    dead = 2 ** 22 + 12345  # above any pid_max: no such process
    stale = own.replace(f'.{os.getpid()}.', f'.{dead}.')
    unrelated = str(tmp_path / '.hidden.tmp')
    for path in (stale, own, unrelated):
        open(path, 'wb').write(b'partial')
    assert remove_stale_temp_files(tmp_path) == [stale]
    assert os.path.exists(own) and os.path.exists(unrelated)


def test_import_leaves_mmengine_local_backend_alone(tmp_path, monkeypatch):
    """Importing afno_seg changes no mmengine backend; a save asks for the atomic one by name."""
    from mmengine.fileio import LocalBackend, get_file_backend
    from mmengine.runner.checkpoint import save_checkpoint
    assert type(get_file_backend(str(tmp_path / 'x.pth'))) is LocalBackend
    written = []

    def record(file, data, path):
        written.append(path)
        file.write(data)

    monkeypatch.setattr(atomic_io, '_write_all', record)
    save_checkpoint({'w': torch.ones(2)}, str(tmp_path / 'plain.pth'))
    save_checkpoint({'w': torch.ones(2)}, str(tmp_path / 'atomic.pth'),
                    backend_args=dict(backend=atomic_io.ATOMIC_BACKEND))
    assert written == [str(tmp_path / 'atomic.pth')]
    assert torch.equal(read_checkpoint(tmp_path / 'atomic.pth')['w'], torch.ones(2))


def test_hook_saves_every_checkpoint_atomically_best_ones_too(tiny_demo_data, tmp_path,
                                                              monkeypatch):
    """AtomicCheckpointHook hands mmengine backend_args naming the atomic backend, which mmengine
    passes to its save_best saves as well: every file goes through atomic_write, and what
    mmengine records (best_ckpt, last_ckpt) names the final files, never a temporary one."""
    written = []

    def record(file, data, path):
        written.append(os.path.basename(path))
        file.write(data)

    monkeypatch.setattr(atomic_io, '_write_all', record)
    cfg = load_config(TINY_CONFIG)
    cfg.val_dataloader.dataset.data_root = str(tiny_demo_data) + '/'
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 2, 'train_cfg.val_interval': 2, 'val_cfg': cfg.val_cfg,
        'val_dataloader': cfg.val_dataloader, 'val_evaluator': cfg.val_evaluator,
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
        'default_hooks.checkpoint.interval': 2, 'default_hooks.checkpoint.save_best': 'mIoU',
        'default_hooks.checkpoint.rule': 'greater'})
    runner.train()
    # mmengine saves iter_2 again after the best one, so that it records the best score
    assert written == ['iter_2.pth', 'last_checkpoint', 'best_mIoU_iter_2.pth', 'iter_2.pth']
    assert runner.message_hub.get_info('best_ckpt') == str(tmp_path / 'best_mIoU_iter_2.pth')
    assert runner.message_hub.get_info('last_ckpt') == str(tmp_path / 'iter_2.pth')
    assert read_checkpoint(tmp_path / 'best_mIoU_iter_2.pth')['meta']['iter'] == 2
    assert not glob.glob(str(tmp_path / '.*.tmp'))


@pytest.mark.parametrize('hook_type', ['CheckpointHook', 'AtomicCheckpointHook'])
def test_failed_save_with_max_keep_one_keeps_the_previous_checkpoint(
        tiny_demo_data, tmp_path, monkeypatch, hook_type):
    """mmengine deletes the kept checkpoint BEFORE writing its successor (in place, through its
    'local' backend); ours after. Ours names the file and the cause (tools print it as one line)
    and leaves only the complete iter_2."""
    from mmengine.fileio import LocalBackend

    def fail_on_iter_4(file, data, path):
        if path.endswith('iter_4.pth'):
            file.write(data[:len(data) // 2])  # the disk fills up half-way through the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        file.write(data)

    def put(backend, data, path):  # mmengine's LocalBackend.put: open(path, 'wb') + write
        with open(path, 'wb') as file:
            fail_on_iter_4(file, data, str(path))

    monkeypatch.setattr(atomic_io, '_write_all', fail_on_iter_4)
    monkeypatch.setattr(LocalBackend, 'put', put)
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 4, 'default_hooks.checkpoint.type': hook_type,
        'default_hooks.checkpoint.interval': 2, 'default_hooks.checkpoint.max_keep_ckpts': 1})
    with pytest.raises(SaveError if hook_type == 'AtomicCheckpointHook' else OSError,
                       match='iter_4.pth' if hook_type == 'AtomicCheckpointHook' else None) \
            as error:
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


# --------------------------------------------------------------------------- work_dir

def test_unwritable_work_dir_fails_before_building(tiny_demo_data, tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    with pytest.raises(UserError) as error:
        make_runner(tiny_demo_data, blocker / 'work_dir')
    assert f'work_dir {blocker / "work_dir"} is not writable' in str(error.value)
    assert 'Not a directory' in str(error.value) and '--work-dir' in str(error.value)


def test_unwritable_work_dir_message_from_the_tool(tiny_demo_data, tmp_path):
    """tools/train.py's --work-dir reaches the check (its UserError is printed as one line, exit
    status 1: tests/test_tools.py::test_missing_data_root_fails_at_once runs the process)."""
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    train = load_script('tools/train.py')
    with pytest.raises(UserError, match=f'work_dir {blocker / "w"} is not writable'):
        train.main([TINY_CONFIG, '--work-dir', str(blocker / 'w'),
                    *cli_options(data_roots(tiny_demo_data))])
