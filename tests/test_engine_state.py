"""Stop-signal handlers: one StopSignals instance holds them at a time (``StopSignals.current``),
a context manager gives them back; inside ``run_tool`` a failure leaves them ignored (the tool
exits)."""
import signal

import pytest
from mmengine.runner import Runner

from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint_hook import StopSignals, stop_signals_released
from afno_seg.engine.runner import AfnoSegRunner


class _Runner(AfnoSegRunner):
    """AfnoSegRunner whose Runner.train installs handlers as the checkpoint hook does, then
    fails (no Runner is built: train() is all this test calls)."""

    def __init__(self):
        pass


@pytest.fixture(autouse=True)
def _failing_runner_train(monkeypatch):
    def train(self):
        assert StopSignals(['SIGUSR2']).install()
        raise UserError('training failed')
    monkeypatch.setattr(Runner, 'train', train)


def test_one_stop_signals_instance_holds_the_handlers_at_a_time():
    previous = signal.getsignal(signal.SIGUSR2)
    assert StopSignals.current is None
    with StopSignals(['SIGUSR2']) as stop:
        assert StopSignals.current is stop
        other = StopSignals(['SIGUSR2'])
        assert other.install() and StopSignals.current is other  # stop uninstalled first
        other.uninstall()
    assert StopSignals.current is None
    assert signal.getsignal(signal.SIGUSR2) is previous


@pytest.mark.parametrize('ignore_on_error', [False, True])
def test_stop_signals_released_however_the_block_ends(ignore_on_error):
    previous = signal.getsignal(signal.SIGUSR2)
    with stop_signals_released(ignore_on_error):
        StopSignals(['SIGUSR2']).install()
    assert signal.getsignal(signal.SIGUSR2) is previous  # a normal end restores them
    try:
        with pytest.raises(RuntimeError), stop_signals_released(ignore_on_error):
            StopSignals(['SIGUSR2']).install()
            raise RuntimeError
        assert StopSignals.current is None
        assert signal.getsignal(signal.SIGUSR2) is (signal.SIG_IGN if ignore_on_error
                                                    else previous)
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_a_failed_train_restores_handlers_outside_a_tool_and_ignores_them_inside():
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        with pytest.raises(UserError):
            _Runner().train()
        assert signal.getsignal(signal.SIGUSR2) is previous
        assert run_tool(_Runner().train) == 1
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
        signal.signal(signal.SIGUSR2, previous)
        with pytest.raises(UserError):  # outside run_tool again: restored, not ignored
            _Runner().train()
        assert signal.getsignal(signal.SIGUSR2) is previous
    finally:
        signal.signal(signal.SIGUSR2, previous)
