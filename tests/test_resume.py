"""Resume: a run killed at random moments (SIGKILL, also half-way through a checkpoint write) and
resumed with --resume ends bitwise equal to one never interrupted; RandomStateHook is what makes a
resumed run with dropout and drop-path equal.

The SIGKILL test runs tools/train.py as a subprocess (the kill is the behaviour); stop signals are
in tests/test_preemption.py, a dead rank in tests/test_dead_rank.py. docs/reliability.md quotes
the numbers these tests produce.
"""
import glob
import random
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine import load_config

from conftest import (
    ROOT,
    TINY_CONFIG,
    assert_same_training_state,
    cli_options,
    complete_checkpoint_named_by,
    data_roots,
    make_runner,
    read_checkpoint,
    seam_env,
    wait_for,
    write_seamed_config,
)

# --------------------------------------------------------------------------- random state

def test_resume_draws_the_dropout_masks_of_the_uninterrupted_run():
    """Fast, no training: RandomStateHook's checkpoint of iteration 2, loaded by a process whose
    generators are elsewhere, gives iteration 3 the dropout masks and the Python/NumPy data draws
    of the run that never stopped (the slow tests below train through it)."""
    from types import SimpleNamespace

    import numpy as np
    from mmengine.config import Config

    from afno_seg.engine.random_state import RandomStateHook

    def runner(iteration):
        return SimpleNamespace(iter=iteration, cfg=Config(dict(randomness=dict(seed=0))),
                               logger=SimpleNamespace(info=print, warning=print))

    def iteration_draws():  # a data pipeline's draws, then the model's dropout
        return (random.random(), np.random.rand(), torch.nn.functional.dropout(
            torch.ones(64), 0.5, training=True))

    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    uninterrupted = RandomStateHook()
    uninterrupted.before_train(runner(0))  # the data streams' start, kept in the checkpoint
    first = [iteration_draws() for _ in range(2)]
    checkpoint = dict(meta=dict(iter=2))
    uninterrupted.before_save_checkpoint(runner(2), checkpoint)
    expected = iteration_draws()

    torch.manual_seed(1), random.seed(1), np.random.seed(1)  # a new process
    resumed = RandomStateHook()
    resumed.after_load_checkpoint(runner(2), checkpoint)
    resumed.before_train(runner(2))
    replayed = [iteration_draws()[:2] for _ in range(2)]  # mmengine's fast-forward of the data
    resumed.before_train_iter(runner(2), 2)
    assert replayed == [draws[:2] for draws in first]
    got = iteration_draws()
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


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

KILL_CYCLES = 4
KILL_MAX_ITERS = 12


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_matches_uninterrupted_run(tiny_demo_data,
                                                                         tmp_path):
    """4 SIGKILLs (half of them while a checkpoint is half-written), a --resume after each:
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
                delay = rng.uniform(0.0, 0.3)  # the write takes 0.8 s
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
    assert mid_write_kills >= 2 and len(set(resumed_from)) >= 3
    assert not glob.glob(str(work_dir / '.*.tmp'))  # the next run cleared the partial files
    assert_same_training_state(read_checkpoint(work_dir / f'iter_{KILL_MAX_ITERS}.pth'),
                               read_checkpoint(reference_dir / f'iter_{KILL_MAX_ITERS}.pth'))
