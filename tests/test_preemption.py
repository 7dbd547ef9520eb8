"""Preemption: stop signals, a second signal, automatic continuation, the rerun loop of
slurm_train.sh outside a batch job (against a stand-in srun; the real Slurm runs, requeue
included, are in tests/test_slurm.py), time-based checkpoints.

Signals and kills are sent by a test hook at a chosen iteration (env var seam) rather than after
sleeps, so the runs are deterministic on a loaded machine. docs/reliability.md quotes these tests.
A SIGKILLed rank is in tests/test_dead_rank.py, data-loader worker faults in
tests/test_dataloader_faults.py.
"""
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine import checkpoint_hook
from afno_seg.engine.checkpoint_hook import (
    INTERRUPTED_EXIT_CODE,
    StopSignals,
    TrainingInterrupted,
    restart_count,
)

from conftest import (
    ROOT,
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

MAX_ITERS = 8

FAULT_SEAMS = '''
"""Test seam imported through custom_imports: a signal or SIGKILL before a chosen iteration.

AFNO_TEST_FAULT='SIGTERM@5' sends SIGTERM to this process before iteration 5; '@rank1' only on
rank 1; '@group' to the whole process group (data-loader workers too) from another process, as
Slurm does. Only in a first attempt (not in a process torchrun restarted).
"""
import os, signal, subprocess, sys
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class FaultAtIterationHook(Hook):
    priority = 'VERY_HIGH'

    def __init__(self):
        self.faults = []
        for item in filter(None, os.environ.get('AFNO_TEST_FAULT', '').split(',')):
            name, at, *where = item.split('@')
            self.faults.append((getattr(signal, name), int(at), where[0] if where else None))

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if os.environ.get('TORCHELASTIC_RESTART_COUNT', '0') != '0':
            return
        for number, at, where in self.faults:
            if runner.iter + 1 != at:
                continue
            if where == 'group':  # from another process, in a session of its own
                subprocess.run([sys.executable, '-c', 'import os, sys; os.killpg(*map(int, '
                                'sys.argv[1:]))', str(os.getpgid(0)), str(int(number))],
                               check=True, start_new_session=True)
            elif where is None or where == f"rank{os.environ.get('RANK', '0')}":
                os.kill(os.getpid(), number)
'''


def write_fault_config(folder: Path, max_iters: int = MAX_ITERS, **lines: str) -> str:
    """conftest's seamed config (slow-save seam, RNG hooks), plus the fault hook, drop-path
    and dropout (so RNG matters) and a checkpoint every 2 iterations."""
    (folder / 'fault_seams.py').write_text(FAULT_SEAMS)
    defaults = dict(
        custom_imports="dict(imports=['afno_seg', 'reliability_seams', 'fault_seams'], "
                       "allow_failed_imports=False)",
        custom_hooks="[dict(type='RandomStateHook'), dict(type='NonFiniteLossHook'), "
                     "dict(type='FaultAtIterationHook')]",
        model="dict(backbone=dict(drop_path_rate=0.1), decode_head=dict(dropout_ratio=0.1))",
        default_hooks="dict(checkpoint=dict(type='AtomicCheckpointHook', interval=2, "
                      "max_keep_ckpts=2))")
    return write_seamed_config(folder, max_iters, **{**defaults, **lines})


def train_command(config: str, data_root, work_dir, *extra) -> list:
    return [sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir), *extra,
            *cli_options(data_roots(data_root))]


def run(command, env, timeout=400, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=ROOT, env=env, timeout=timeout, capture_output=True,
                            text=True, **kwargs)
    result.output = result.stdout + result.stderr
    return result


def resumed_from(output: str) -> int | None:
    match = re.search(r'resumed epoch: \d+, iter: (\d+)', output)
    return int(match[1]) if match else None


@pytest.fixture(scope='module')
def reference(tiny_demo_data, tmp_path_factory):
    """The uninterrupted run of the fault config with two data-loader workers."""
    folder = tmp_path_factory.mktemp('reference')
    config = write_fault_config(folder, train_dataloader='dict(num_workers=2, '
                                                         'persistent_workers=True)')
    result = run(train_command(config, tiny_demo_data, folder / 'work'), seam_env(folder))
    assert result.returncode == 0, result.output[-3000:]
    return read_checkpoint(folder / 'work' / f'iter_{MAX_ITERS}.pth')


# --------------------------------------------------------------------------- signal handler


def test_stop_signals_record_the_first_and_treat_copies_as_the_same_event():
    stop = StopSignals(['SIGUSR1', 'SIGUSR2'])
    previous = signal.getsignal(signal.SIGUSR1)
    assert stop.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR1)  # within the same-event window: not a second one
        assert stop.received == signal.SIGUSR2  # both handled: the process is still here
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is previous
    with pytest.raises(KeyError, match='SIGNOPE'):
        StopSignals(['SIGNOPE'])


SECOND_SIGNAL = '''
import os, signal, threading, time
from afno_seg.engine.checkpoint_hook import StopSignals
stop = StopSignals()
stop.install()
os.kill(os.getpid(), signal.SIGTERM)
print('first:', stop.received.name, flush=True)
threading.Timer(2.5, os.kill, (os.getpid(), signal.SIGINT)).start()
threading.Event().wait(60)  # a wait Python interrupts for its handlers
print('still running')
'''


def test_a_second_signal_exits_at_once():
    started = time.monotonic()
    result = run([sys.executable, '-c', SECOND_SIGNAL], dict(os.environ, OMP_NUM_THREADS='1'),
                 timeout=120)
    assert result.returncode == 128 + signal.SIGINT, result.output[-3000:]
    assert 'first: SIGTERM' in result.stdout and 'still running' not in result.stdout
    assert ('second stop signal (SIGINT): exiting now, without a checkpoint of the current '
            'iteration') in result.stderr
    assert time.monotonic() - started < 60


def test_restart_count_reads_torchrun_and_slurm(monkeypatch):
    for variable in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT'):
        monkeypatch.delenv(variable, raising=False)
    assert restart_count() is None
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '0')
    assert restart_count() is None
    monkeypatch.setenv('SLURM_RESTART_COUNT', '2')
    assert restart_count() == ('Slurm', 2)
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')
    assert restart_count() == ('torchrun', 1)


# --------------------------------------------------------------------------- in-process runs

@HOOKS.register_module(force=True)
class SignalBeforeIterationHook(Hook):
    """Test only: send ``signal_name`` to this process before iteration ``at``."""

    priority = 'VERY_HIGH'

    def __init__(self, signal_name: str, at: int) -> None:
        self.number, self.at = getattr(signal, signal_name), at

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.at:
            os.kill(os.getpid(), self.number)


@pytest.mark.parametrize('signal_name', ['SIGINT', 'SIGUSR1'])
def test_stop_signal_saves_that_iteration_and_raises(tiny_demo_data, tmp_path, signal_name):
    previous = signal.getsignal(getattr(signal, signal_name))
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 4,
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
        'default_hooks.checkpoint.interval': 100,
        'custom_hooks': [dict(type='SignalBeforeIterationHook', signal_name=signal_name, at=3)]})
    with pytest.raises(TrainingInterrupted) as stopped:
        runner.train()
    assert stopped.value.exit_code == INTERRUPTED_EXIT_CODE == 75
    assert str(stopped.value).startswith(f'{signal_name} received: training stopped after '
                                         f'iteration 3; {tmp_path / "iter_3.pth"} holds it')
    assert complete_checkpoint_named_by(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == ['iter_3.pth']
    assert signal.getsignal(getattr(signal, signal_name)) is previous  # handlers restored


class FakeClock:
    """``checkpoint_hook.now`` for the tests: advanced by hand."""

    def __init__(self) -> None:
        self.seconds = 1000.0

    def __call__(self) -> float:
        return self.seconds


@HOOKS.register_module(force=True)
class AdvanceClockHook(Hook):
    """Test only: every iteration takes ``seconds`` on the fake clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        checkpoint_hook.now.seconds += self.seconds


def test_time_based_interval_saves_every_n_minutes_besides_every_k_iterations(
        tiny_demo_data, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_hook, 'now', FakeClock())
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'train_cfg.max_iters': 7,
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
        'default_hooks.checkpoint.interval': 5,
        'default_hooks.checkpoint.interval_minutes': 1,
        'custom_hooks': [dict(type='AdvanceClockHook', seconds=25)]})
    runner.train()
    # t = 25 s per iteration: 75 s at 3 (clock), 5 by the iteration interval (resets the clock),
    # 7 is the last iteration; 6 (25 s after 5) is not due.
    assert sorted(int(p.stem[5:]) for p in tmp_path.glob('iter_*.pth')) == [3, 5, 7]
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text()
    assert 'Saving checkpoint at 3 iterations (1 min since the last save)' in log
    assert log.count('Saving checkpoint at 5 iterations') == 1


# --------------------------------------------------------------------------- tools/train.py

@pytest.mark.slow
def test_sigterm_at_a_random_iteration_then_resume_matches_uninterrupted_run(
        tiny_demo_data, tmp_path, reference):
    """SIGTERM to every process of the job (data-loader workers too, as Slurm sends it) before a
    random iteration: that iteration is checkpointed, the exit status is 75, and --resume ends
    bitwise equal to the uninterrupted run."""
    at = random.Random(15).choice([3, 5, 7])  # not a multiple of the interval: a new checkpoint
    config = write_fault_config(tmp_path, train_dataloader='dict(num_workers=2, '
                                                           'persistent_workers=True)')
    work_dir = tmp_path / 'work'
    command = train_command(config, tiny_demo_data, work_dir, '--resume')
    stopped = run(command, seam_env(tmp_path, AFNO_TEST_FAULT=f'SIGTERM@{at}@group'),
                  start_new_session=True)  # its own process group: the signal spares pytest
    assert stopped.returncode == INTERRUPTED_EXIT_CODE, stopped.output[-3000:]
    assert f'Saving checkpoint at {at} iterations (stop signal SIGTERM)' in stopped.output
    assert stopped.output.count(f'SIGTERM received: training stopped after iteration {at}; '
                                f'{work_dir / f"iter_{at}.pth"} holds it') == 1
    assert 'Traceback' not in stopped.output
    assert complete_checkpoint_named_by(work_dir) == at

    resumed = run(command, seam_env(tmp_path))
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert resumed_from(resumed.output) == at
    assert_same_training_state(read_checkpoint(work_dir / f'iter_{MAX_ITERS}.pth'), reference)


@pytest.mark.slow
def test_signals_during_checkpoint_writes_never_leave_a_partial_checkpoint_named(
        tiny_demo_data, tmp_path):
    """1. SIGTERM while iter_4.pth is being written: the write completes, no second save, exit
    75. 2. Resumed, SIGTERM before iteration 5, then a second SIGTERM while iter_5.pth is being
    written: exit at once (143), last_checkpoint still names iter_4.pth, iter_5 only a temp
    file (which the next run removes, as test_resume's SIGKILL test shows)."""
    config = write_fault_config(tmp_path)
    work_dir = tmp_path / 'work'
    command = train_command(config, tiny_demo_data, work_dir, '--resume')

    def start(log_name, **variables):
        log = open(tmp_path / log_name, 'w')
        process = subprocess.Popen(command, cwd=ROOT, env=seam_env(tmp_path, **variables),
                                   stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return process

    def own_temp(process, step):
        return list(work_dir.glob(f'.iter_{step}.pth.{process.pid}.*.tmp'))

    process = start('first.log', AFNO_TEST_SAVE_DELAY='1.5')
    try:
        assert wait_for(lambda: own_temp(process, 4), process)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=300)
    finally:
        process.kill()
    output = (tmp_path / 'first.log').read_text()
    assert process.returncode == INTERRUPTED_EXIT_CODE, output[-3000:]
    assert output.count('Saving checkpoint at 4 iterations') == 1
    assert complete_checkpoint_named_by(work_dir) == 4

    process = start('second.log', AFNO_TEST_SAVE_DELAY='4', AFNO_TEST_FAULT='SIGTERM@5')
    try:
        assert wait_for(lambda: own_temp(process, 5), process)
        time.sleep(1.5)  # past the same-event window after the first signal
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=300)
        partial = own_temp(process, 5)
    finally:
        process.kill()
    output = (tmp_path / 'second.log').read_text()
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert ('second stop signal (SIGTERM): exiting now, without a checkpoint of the current '
            'iteration') in output
    assert resumed_from(output) == 4
    assert partial and not (work_dir / 'iter_5.pth').exists()
    assert complete_checkpoint_named_by(work_dir) == 4


# --------------------------------------------------------------------------- slurm_train.sh

FAKE_SRUN = '''#!/usr/bin/env bash
# Records its arguments, exits with the next status of $FAKE_STATUSES.
echo "srun $*" >> "$FAKE_LOG"
count=$(grep -c '^srun' "$FAKE_LOG")
status=$(echo $FAKE_STATUSES | cut -d' ' -f"$count")
exit "${status:-0}"
'''
FAKE_SCONTROL = '''#!/usr/bin/env bash
echo "scontrol $*" >> "$FAKE_LOG"
'''


@pytest.mark.parametrize('case', ['outside a job', 'failure'])
def test_slurm_train_reruns_with_resume_outside_a_job_and_asks_for_gpus(tmp_path, case):
    """What tests/test_slurm.py's real cluster (one CPU node) cannot show: the GPU request
    (--gres, tasks per node) and, outside a batch job, reruns on status 75 until training ends;
    any other status is returned as it is."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name, text in (('srun', FAKE_SRUN), ('scontrol', FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    log = tmp_path / 'calls.log'
    statuses = {'outside a job': '75 75 0', 'failure': '3'}[case]
    env = {key: value for key, value in os.environ.items()
           if not key.startswith('SLURM_') and key not in ('GPUS', 'GPUS_PER_NODE')}
    env.update(PATH=f'{bin_dir}{os.pathsep}{env["PATH"]}', FAKE_LOG=str(log),
               FAKE_STATUSES=statuses, SIGNAL_LEAD='240', PYTHON='python')
    result = subprocess.run(['bash', 'tools/slurm_train.sh', 'gpu', 'afno', 'configs/x.py',
                             '--work-dir', 'w'], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    calls = log.read_text().splitlines()
    srun_calls = [call for call in calls if call.startswith('srun')]
    assert all('--ntasks=8 --gres=gpu:8 --ntasks-per-node=8' in call
               and '--signal=USR1@240' in call and '--launcher=slurm --work-dir w' in call
               for call in srun_calls), calls
    if case == 'outside a job':
        assert result.returncode == 0, result.stderr
        assert len(srun_calls) == 3 and not any(c.startswith('scontrol') for c in calls)
        assert '--resume' not in srun_calls[0]
        assert srun_calls[1].endswith('--resume') and srun_calls[2].endswith('--resume')
        assert 'running it again with --resume (1 of 20)' in result.stderr
    else:
        assert result.returncode == 3 and len(calls) == 1
