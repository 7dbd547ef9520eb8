"""Ranks agree on a stop signal (docs/reliability.md, "Stop signals"; issue 43): the agreement
runs every ``agree_every`` iterations and at the last (counted on a stand-in collective), and in a
2-process torchrun run where rank 1 alone gets SIGTERM both ranks stop after the same iteration,
that iteration is the checkpoint, and both exit with status 75.
"""
import re
import signal
from types import SimpleNamespace

import pytest
from test_dead_rank import dist_train
from test_preemption import write_fault_config

import afno_seg  # noqa: F401  (registers the hooks)
from afno_seg.engine import checkpoint_hook
from afno_seg.engine.checkpoint_hook import AtomicCheckpointHook, TrainingInterrupted

from conftest import complete_checkpoint_named_by, read_checkpoint


class Ranks:
    """Stand-in for the all-reduce over ranks: counts the iterations it runs in; ``signal_at``:
    from that agreement on, another rank reports SIGTERM."""

    def __init__(self, runner, signal_at: int | None = None) -> None:
        self.runner, self.signal_at, self.iterations = runner, signal_at, []

    def __call__(self, requests, op) -> None:
        assert op == 'max'
        self.iterations.append(self.runner.iter + 1)
        if self.signal_at is not None and self.runner.iter + 1 >= self.signal_at:
            requests[0] = max(float(requests[0]), float(signal.SIGTERM))


def train_with(monkeypatch, max_iters: int, agree_every: int, signal_at=None,
               local_signal_before=None) -> tuple[list[int], list[int], int | None]:
    """The hook's ``after_train_iter`` over ``max_iters`` iterations of 2 ranks: (iterations the
    collective ran in, iterations saved, iteration stopped after)."""
    runner = SimpleNamespace(iter=0, max_iters=max_iters, logger=SimpleNamespace(
        warning=lambda message: None))
    ranks = Ranks(runner, signal_at)
    monkeypatch.setattr(checkpoint_hook, 'all_reduce', ranks)
    monkeypatch.setattr(checkpoint_hook, 'get_world_size', lambda: 2)
    hook = AtomicCheckpointHook(interval=1000, by_epoch=False, save_last=False,
                                agree_every=agree_every)
    saved = []
    monkeypatch.setattr(hook, 'save', lambda runner, reason: saved.append(runner.iter + 1))
    hook.last_ckpt = 'iter_N.pth'
    for runner.iter in range(max_iters):
        if runner.iter + 1 == local_signal_before:
            hook._stop.received = signal.SIGTERM  # what the handler records
        try:
            hook.after_train_iter(runner, runner.iter)
        except TrainingInterrupted:
            return ranks.iterations, saved, runner.iter + 1
    return ranks.iterations, saved, None


def test_ranks_agree_every_agree_every_iterations_and_at_the_last(monkeypatch):
    assert train_with(monkeypatch, max_iters=11, agree_every=4) == ([4, 8, 11], [], None)
    assert train_with(monkeypatch, max_iters=3, agree_every=10) == ([3], [], None)
    # a signal on this rank before iteration 5 counts at the agreement after iteration 8
    assert train_with(monkeypatch, max_iters=11, agree_every=4, local_signal_before=5) == (
        [4, 8], [8], 8)
    # another rank's signal, seen at the agreement after iteration 8: this rank stops there too
    assert train_with(monkeypatch, max_iters=11, agree_every=4, signal_at=5) == ([4, 8], [8], 8)
    # at the last iteration a signal is saved for, nothing stopped: training has ended
    assert train_with(monkeypatch, max_iters=11, agree_every=4, local_signal_before=10) == (
        [4, 8, 11], [11], None)


#: Test seam: each rank writes the last iteration it finished (before the checkpoint hook, which
#: may stop training after it) to $AFNO_TEST_ITERATIONS/rankR.
LAST_ITERATION_SEAM = '''
import os
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class LastIterationHook(Hook):
    priority = 'VERY_HIGH'

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        folder = os.environ['AFNO_TEST_ITERATIONS']
        with open(os.path.join(folder, 'rank' + os.environ['RANK']), 'w') as file:
            file.write(str(runner.iter + 1))
'''


@pytest.mark.slow
def test_sigterm_to_one_torchrun_rank_stops_both_after_the_same_iteration(tiny_demo_data,
                                                                          tmp_path):
    """Rank 1 alone gets SIGTERM before iteration 2; the ranks agree every 3 iterations (of 4):
    both stop after iteration 3, iter_3.pth holds it, both exit 75 (torchrun's summary)."""
    (tmp_path / 'last_iteration_seam.py').write_text(LAST_ITERATION_SEAM)
    config = write_fault_config(
        tmp_path, max_iters=4,
        custom_imports="dict(imports=['afno_seg', 'reliability_seams', 'fault_seams', "
                       "'last_iteration_seam'], allow_failed_imports=False)",
        custom_hooks="[dict(type='FaultAtIterationHook'), dict(type='LastIterationHook')]",
        default_hooks="dict(checkpoint=dict(type='AtomicCheckpointHook', interval=2, "
                      "max_keep_ckpts=2, agree_every=3))")
    (tmp_path / 'iterations').mkdir()
    result = dist_train(config, tiny_demo_data, tmp_path / 'work', tmp_path,
                        AFNO_TEST_FAULT='SIGTERM@2@rank1',
                        AFNO_TEST_ITERATIONS=str(tmp_path / 'iterations'))
    assert result.returncode != 0, result.output[-4000:]  # torchrun: its workers failed
    for rank in (0, 1):
        assert (tmp_path / 'iterations' / f'rank{rank}').read_text() == '3', result.output[-4000:]
        assert re.search(rf'rank\s+: {rank} \(local_rank: {rank}\)\n\s+exitcode\s+: 75 ',
                         result.output), result.output[-4000:]
    assert 'SIGTERM received: training stopped after iteration 3' in result.output
    assert complete_checkpoint_named_by(tmp_path / 'work') == 3
    assert read_checkpoint(tmp_path / 'work' / 'iter_3.pth')['meta']['iter'] == 3
    assert not (tmp_path / 'work' / 'iter_4.pth').exists()

