"""A work dir belongs to one run: tools/train.py into one that holds a run is refused in one line
(before anything is built); ``--resume`` of a finished run reports it without training (`make
demo` run twice); ``--overwrite`` moves the old run aside and starts over.

Cost: in-process, on a copy of the shared ``tiny_trained`` run; one 2-iteration training.
"""
import re
import shutil

import pytest
import torch

from afno_seg.engine import run_tool

from conftest import TINY_CONFIG, cli_options, data_roots, load_script


@pytest.fixture
def used_work_dir(tiny_trained, tmp_path):
    """A copy of the shared run (iter_3.pth, iter_6.pth, last_checkpoint, config, log folder)."""
    work_dir = tmp_path / 'work'
    shutil.copytree(tiny_trained.work_dir, work_dir)
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_6.pth'))
    return work_dir


def train(work_dir, data, *flags, options=()) -> int:
    main = load_script('tools/train.py').main
    return run_tool(lambda: main([TINY_CONFIG, '--work-dir', str(work_dir), *flags,
                                  *cli_options(data_roots(data)), 'train_cfg.val_interval=100',
                                  *options]))


def test_a_used_work_dir_is_refused_naming_the_run_and_the_ways_on(used_work_dir, tiny_demo_data,
                                                                   capsys):
    before = sorted(p.name for p in used_work_dir.iterdir())
    assert train(used_work_dir, tiny_demo_data) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f'error: work_dir {used_work_dir} '), err
    for fragment in ('iteration 6', 'iter_6.pth', 'config tiny_demo.py', '--resume continues it',
                     '--overwrite starts over', 'another --work-dir'):
        assert fragment in err, (fragment, err)
    assert sorted(p.name for p in used_work_dir.iterdir()) == before  # nothing built or written


def test_resume_of_a_finished_run_reports_it_without_training(used_work_dir, tiny_demo_data,
                                                              capsys):
    """`make demo` a second time: train --resume ends at once with the finished run's results."""
    before = sorted(p.name for p in used_work_dir.iterdir())
    assert train(used_work_dir, tiny_demo_data, '--resume') == 0
    out = capsys.readouterr().out
    assert f'{used_work_dir} holds a finished run: {used_work_dir / "iter_6.pth"}' in out, out
    assert out.rstrip().splitlines()[-2:] == [f'  checkpoint  {used_work_dir / "iter_6.pth"}',
                                              f'  config      {used_work_dir}/tiny_demo.py']
    assert 'Iter(train)' not in out and sorted(p.name for p in used_work_dir.iterdir()) == before


def test_overwrite_moves_the_old_run_aside_and_starts_over(used_work_dir, tiny_demo_data, capsys):
    old = {p.name: p.stat().st_size for p in used_work_dir.iterdir() if p.is_file()}
    assert train(used_work_dir, tiny_demo_data, '--overwrite', options=[
        'train_cfg.max_iters=2', 'default_hooks.checkpoint.interval=2']) == 0
    out = capsys.readouterr().out
    aside = re.search(r'--overwrite: .* moved to (\S+)/ ', out)
    assert aside, out
    moved = {p.name: p.stat().st_size for p in (used_work_dir / aside[1]).iterdir() if p.is_file()}
    assert moved == old  # every file of the old run, none deleted
    assert re.findall(r'Iter\(train\) \[\s*(\d+)/2\]', out) == ['1', '2']  # from the start
    assert (used_work_dir / 'last_checkpoint').read_text().strip() == str(
        used_work_dir / 'iter_2.pth')
    assert not (used_work_dir / 'iter_6.pth').exists()
    assert torch.load(used_work_dir / 'iter_2.pth', weights_only=False)['meta']['iter'] == 2
