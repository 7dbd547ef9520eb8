"""The engine keeps no hidden state: stop-signal handlers are read from the signal table and given
back by a context manager; inside ``run_tool`` a failure leaves them ignored (the tool exits)."""
import signal

import pytest
from mmengine.runner import Runner

from afno_seg.engine import UserError, run_tool
from afno_seg.engine.preemption import (
    StopSignals,
    installed_stop_signals,
    stop_signals_released,
)
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


def test_installed_stop_signals_is_read_from_the_signal_table():
    previous = signal.getsignal(signal.SIGUSR2)
    assert installed_stop_signals() is None
    with StopSignals(['SIGUSR2']) as stop:
        assert installed_stop_signals() is stop
        other = StopSignals(['SIGUSR2'])
        assert other.install() and not stop.installed  # one installed at a time
        assert installed_stop_signals() is other
        other.uninstall()
    assert installed_stop_signals() is None
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
        assert installed_stop_signals() is None
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
