"""Data-loader workers: one killed (as by the OOM killer) or stuck is an error naming the worker and
its sample within a bounded time; stop signals sent to the workers too leave the shutdown to the
main process; workers whose main process was SIGKILLed exit.

In-process runs on the tiny config with two workers; a test transform misbehaves in a worker
(never in the main process) when it reaches a chosen image.
"""
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress

import pytest
import torch
from mmseg.registry import TRANSFORMS

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine.dataloader_faults import (
    DEFAULT_TIMEOUT_S,
    TrackedDataset,
    explain_worker_failure,
)
from afno_seg.engine.distributed import process_running

from conftest import ROOT, make_runner


def _chain(error):
    """``error`` and what it was raised from or during."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


@TRANSFORMS.register_module(force=True)
class MisbehaveInWorker:
    """Test only: in a data-loader worker, on ``victim``'s image, SIGKILL itself or hang."""

    def __init__(self, victim: str, mode: str) -> None:
        self.victim, self.mode = victim, mode

    def __call__(self, results: dict) -> dict:
        if (torch.utils.data.get_worker_info() is not None
                and results['img_path'].endswith(self.victim)):
            if self.mode == 'kill':
                os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer sends
            time.sleep(60)  # stuck (a dead NFS mount, an endless loop)
        return results


def faulty_runner(data_root, work_dir, victim: str, mode: str, **options):
    pipeline = [dict(type='MisbehaveInWorker', victim=victim, mode=mode),
                dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                dict(type='RandomCrop', crop_size=(64, 64)), dict(type='PackSegInputs')]
    return make_runner(data_root, work_dir, **{
        'train_cfg.max_iters': 40, 'train_dataloader.num_workers': 2,
        'train_dataloader.persistent_workers': False, 'train_dataloader.dataset.pipeline': pipeline,
        **options})


def victim_image(data_root) -> str:
    return sorted(str(p) for p in (data_root / 'leftImg8bit' / 'train').rglob('*.png'))[5]


def train_until_failure(runner) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(Exception) as failure:  # see explain_worker_failure: maybe wrapped
        runner.train()
    return failure.value, time.monotonic() - started


def shut_down(runner) -> None:
    """Stop the loader's workers now (the stuck one included) instead of at interpreter exit.

    The workers are killed first: a loader iterator still referenced by the caught error would
    otherwise join the stuck worker for 5 s per worker whenever the garbage collector reaches it,
    in whichever later test that happens."""
    for worker in multiprocessing.active_children():
        worker.kill()
        worker.join()
    iterator = getattr(runner.train_loop.dataloader_iterator, '_iterator', None)
    if iterator is not None and hasattr(iterator, '_shutdown_workers'):
        iterator._shutdown_workers()
    del runner
    gc.collect()


def test_killed_worker_is_named_with_its_sample(tiny_demo_data, tmp_path):
    victim = victim_image(tiny_demo_data)
    runner = faulty_runner(tiny_demo_data, tmp_path, os.path.basename(victim), 'kill')
    previous = signal.getsignal(signal.SIGTERM)
    error, elapsed = train_until_failure(runner)
    assert signal.getsignal(signal.SIGTERM) is previous  # the stop handlers are released
    chain = [f'{type(e).__name__}: {e}' for e in _chain(error)]
    torch_message = next((str(e) for e in _chain(error) if 'DataLoader worker' in str(e)), None)
    assert torch_message is not None, chain
    assert torch_message.startswith('DataLoader worker (pid')  # PyTorch's: only a pid
    message = explain_worker_failure(error)
    dataset = runner.train_dataloader.dataset
    assert isinstance(dataset, TrackedDataset)
    index = next(i for i in range(len(dataset)) if dataset.get_data_info(i)['img_path'] == victim)
    assert message is not None, str(error)
    assert message.startswith('data-loader worker '), message
    assert f'was killed by signal: Killed, while loading sample {index} ({victim})' in message
    assert "OOM killer" in message and message.endswith('Continue with --resume.')
    assert elapsed < 60
    shut_down(runner)


def test_stuck_worker_is_an_error_within_the_timeout(tiny_demo_data, tmp_path):
    victim = victim_image(tiny_demo_data)
    runner = faulty_runner(tiny_demo_data, tmp_path, os.path.basename(victim), 'hang',
                           **{'train_dataloader.timeout': 3})
    previous = signal.getsignal(signal.SIGTERM)
    error, elapsed = train_until_failure(runner)
    assert signal.getsignal(signal.SIGTERM) is previous  # the stop handlers are released
    assert any('DataLoader timed out after 3 seconds' in str(e) for e in _chain(error))
    message = explain_worker_failure(error)
    assert message is not None, str(error)
    assert message.startswith('no batch from the data-loader workers within the timeout of 3 s: '
                              'worker '), message
    assert 'has been loading sample' in message and f'({victim}) for ' in message
    assert elapsed < 3 + 40  # the timeout, plus the batches before the victim's
    shut_down(runner)


def test_loaders_get_a_default_timeout_unless_the_config_sets_one(tiny_demo_data, tmp_path):
    runner = make_runner(tiny_demo_data, tmp_path, **{'train_dataloader.num_workers': 2,
                                                      'train_dataloader.persistent_workers': False})
    assert runner.train_dataloader.timeout == DEFAULT_TIMEOUT_S
    assert isinstance(runner.train_dataloader.dataset, TrackedDataset)
    config = runner.cfg.train_dataloader.to_dict()
    assert runner.build_dataloader({**config, 'timeout': 0}).timeout == 0  # 0: wait forever
    no_workers = runner.build_dataloader({**config, 'num_workers': 0, 'persistent_workers': False})
    assert no_workers.timeout == 0 and not isinstance(no_workers.dataset, TrackedDataset)
    shut_down(runner)  # mmengine's train loop started the workers when it was built


def test_unrelated_errors_are_not_explained():
    assert explain_worker_failure(RuntimeError('CUDA out of memory')) is None


ORPHANS = '''
import os, signal, sys, time
import numpy as np
from torch.utils.data import DataLoader
from afno_seg.engine.dataloader_faults import leave_stop_signals_to_parent

mode, folder = sys.argv[1:]

class Images:  # 1 MB each: a worker ahead of the main process fills the pipe of its queue
    def __len__(self):
        return 100
    def __getitem__(self, index):
        if mode == 'stuck':
            time.sleep(60)  # a read from a dead network mount
        return np.zeros((1000, 1000), np.uint8)

def init(worker_id):
    open(os.path.join(folder, str(os.getpid())), 'w').close()
    leave_stop_signals_to_parent(worker_id)

batches = iter(DataLoader(Images(), batch_size=None, num_workers=2, worker_init_fn=init))
if mode == 'queue_full':
    next(batches)
while len(os.listdir(folder)) < 2:
    time.sleep(0.1)
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.mark.parametrize('mode', ['queue_full', 'stuck'])
def test_workers_exit_when_their_main_process_is_killed(tmp_path, mode):
    """PyTorch's workers watch their parent only between samples, and at exit wait for their
    queue to flush into a pipe that no one reads any more: orphans that stayed for good
    (tools/inference.py's after a SIGKILL, ~500 MB each)."""
    script, folder = tmp_path / 'orphans.py', tmp_path / 'pids'
    script.write_text(ORPHANS)
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    with open(tmp_path / 'log', 'w') as log:  # not a pipe: the orphans would hold it open
        main = subprocess.run([sys.executable, str(script), mode, str(folder)], env=env,
                              stdout=log, stderr=subprocess.STDOUT, timeout=180)
    assert main.returncode == -signal.SIGKILL, (tmp_path / 'log').read_text()[-3000:]
    workers = [int(p.name) for p in folder.iterdir()]
    try:
        deadline = time.monotonic() + 4  # a worker checks its parent every second
        while any(map(process_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2 and not any(map(process_running, workers))
    finally:
        for pid in workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
