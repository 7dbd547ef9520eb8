"""A dead rank in a 2-process gloo run through tools/dist_train.sh: with a torchrun restart the run
ends bitwise equal to one never interrupted; without, every process exits naming the dead rank;
a hung rank ends the run after the collective timeout. The uninterrupted reference run is also the
suite's test of 2-process training through tools/dist_train.sh.

The rank kills itself before a chosen iteration (tests/test_preemption.py's fault seam).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress

import pytest
import torch
from test_preemption import MAX_ITERS, resumed_from, run, write_fault_config

from conftest import (
    ROOT,
    assert_same_training_state,
    cli_options,
    complete_checkpoint_named_by,
    data_roots,
    read_checkpoint,
    seam_env,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def dist_train(config, data_root, work_dir, folder, **variables) -> subprocess.CompletedProcess:
    env = seam_env(folder, PYTHON=sys.executable, PORT=str(free_port()), SHUTDOWN_TIMEOUT='20',
                   **variables)
    return run(['bash', 'tools/dist_train.sh', config, '2', '--work-dir', str(work_dir),
                *cli_options({**data_roots(data_root), 'env_cfg.dist_cfg.timeout': 60})], env,
               timeout=500)


@pytest.mark.slow
def test_sigkilled_rank_with_torchrun_restart_ends_equal_to_uninterrupted_run(tiny_demo_data,
                                                                              tmp_path):
    """2 gloo processes; rank 1 SIGKILLed before iteration 5. MAX_RESTARTS=1: torchrun restarts
    both, they resume from iter_4.pth by themselves and end bitwise equal to a run without the
    kill."""
    config = write_fault_config(tmp_path)
    uninterrupted = dist_train(config, tiny_demo_data, tmp_path / 'reference', tmp_path)
    assert uninterrupted.returncode == 0, uninterrupted.output[-3000:]
    # tools/dist_train.sh on a CPU: torchrun, gloo, every rank trains, finite weights saved.
    assert 'gloo' in uninterrupted.output
    reference = read_checkpoint(tmp_path / 'reference' / f'iter_{MAX_ITERS}.pth')
    assert all(torch.isfinite(v).all() for v in reference['state_dict'].values()
               if v.is_floating_point())
    restarted = dist_train(config, tiny_demo_data, tmp_path / 'work', tmp_path, MAX_RESTARTS='1',
                           AFNO_TEST_FAULT='SIGKILL@5@rank1')
    assert restarted.returncode == 0, restarted.output[-4000:]
    assert 'rank 1 (pid' in restarted.output and 'is no longer running' in restarted.output
    assert restarted.output.count('restart 1 by torchrun: resuming') == 2  # both ranks
    assert resumed_from(restarted.output) == 4
    assert_same_training_state(read_checkpoint(tmp_path / 'work' / f'iter_{MAX_ITERS}.pth'),
                               reference)


@pytest.mark.slow
def test_sigkilled_rank_without_restarts_every_process_names_it_and_exits(tiny_demo_data,
                                                                          tmp_path):
    config = write_fault_config(tmp_path)
    started = time.monotonic()
    result = dist_train(config, tiny_demo_data, tmp_path / 'work', tmp_path,
                        AFNO_TEST_FAULT='SIGKILL@5@rank1')
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    # The surviving rank: one line, naming the dead one, no traceback.
    line = re.search(r'error: rank 0: a collective operation with the other ranks failed in '
                     r'iteration 5 \(.*\): rank 1 \(pid (\d+)\) is no longer running\. ',
                     result.output)
    assert line, result.output[-4000:]
    # torchrun's summary lists rank 1 as killed by SIGKILL. Which failure it observed first (its
    # 'Root Cause') is a race on a loaded machine: rank 0 exits about a second after the kill.
    summary = result.output.split('Failures:')[-1]
    assert re.search(r'rank      : 1 \(local_rank: 1\)\n\s+exitcode  : -9 \(pid: '
                     + line[1] + r'\)', summary), summary
    assert complete_checkpoint_named_by(tmp_path / 'work') == 4
    assert elapsed < 300


@pytest.mark.slow
def test_hung_rank_ends_the_run_after_the_collective_timeout(tiny_demo_data, tmp_path):
    """Rank 1 stops (SIGSTOP) before iteration 5: rank 0's next collective (in DDP's backward)
    fails after env_cfg.dist_cfg.timeout (10 s) with gloo's timeout error, not waiting forever;
    torchrun then ends the stopped rank and the run fails."""
    config = write_fault_config(tmp_path)
    env = seam_env(tmp_path, PYTHON=sys.executable, PORT=str(free_port()), SHUTDOWN_TIMEOUT='5',
                   AFNO_TEST_FAULT='SIGSTOP@5@rank1')
    log_path = tmp_path / 'hung.log'
    with open(log_path, 'w') as log:
        process = subprocess.Popen(
            ['bash', 'tools/dist_train.sh', config, '2', '--work-dir', str(tmp_path / 'work'),
             *cli_options({**data_roots(tiny_demo_data), 'env_cfg.dist_cfg.timeout': 10})],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stopped_at = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if stopped_at is None and re.search(r'Iter\(train\) \[\s*4/', log_path.read_text()):
                stopped_at = time.monotonic()  # rank 1 stops right after iteration 4
            time.sleep(0.1)
        ended_at = time.monotonic()
    finally:  # the stopped rank too, should torchrun not have ended it
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=120)
    output = log_path.read_text()
    assert process.returncode != 0 and stopped_at is not None, output[-4000:]
    # rank 0: torch's error from the timed-out collective, the first failure torchrun reports
    assert '[rank0]: RuntimeError' in output and 'iteration 5' not in output  # no dead rank
    root_cause = output.split('Root Cause')[-1]
    assert re.search(r'rank\s+: 0 \(local_rank: 0\)\n\s+exitcode\s+: 1 ', root_cause), root_cause
    # the collective timeout, rank 0's barrier with the stopped rank on its way out (measured:
    # 20 s in all), torchrun's wait before it SIGKILLs the stopped rank (30 s), start and exit
    assert ended_at - stopped_at < 10 + 10 + 30 + 60


GLOO_PEER_LOST = '''
"""Two gloo ranks; rank 1 SIGKILLs or SIGSTOPs itself; rank 0's next all_reduce fails."""
import os, signal, sys
import torch
import torch.distributed as dist
from afno_seg.engine.distributed import explain_collective_failure, init_cpu_process_group, \\
    record_peers

rank, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ.update(RANK=str(rank), WORLD_SIZE='2', MASTER_ADDR='127.0.0.1')
init_cpu_process_group(timeout_s=5)
record_peers()
dist.all_reduce(torch.ones(1))
if rank == 1:
    os.kill(os.getpid(), getattr(signal, mode))
try:
    dist.all_reduce(torch.ones(1))
except Exception as error:
    with open(out, 'w') as file:
        file.write(f'{type(error).__name__}\\n{explain_collective_failure(error, 7)}')
sys.stdout.flush()
os._exit(0)
'''


@pytest.mark.parametrize('mode', ['SIGKILL', 'SIGSTOP'])
def test_gloo_raises_a_plain_runtime_error_and_the_lost_rank_is_named(tmp_path, mode):
    """Upstream behaviour relied on: gloo (torch 2.14) raises a plain RuntimeError, not a
    DistError, from torch.distributed when a peer died or timed out; explain_collective_failure
    decides from that type and which peers still run, never its text."""
    script, out = tmp_path / 'peer_lost.py', tmp_path / 'rank0.txt'
    script.write_text(GLOO_PEER_LOST)
    env = dict(os.environ, MASTER_PORT=str(free_port()), OMP_NUM_THREADS='1',
               PYTHONPATH=str(ROOT))
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), mode, str(out)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for rank in (0, 1)]
    try:
        ranks[0].wait(timeout=180)
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    assert out.exists(), ranks[0].stdout.read().decode()[-3000:]
    kind, message = out.read_text().split('\n', 1)
    assert kind == 'RuntimeError' and not issubclass(RuntimeError, torch.distributed.DistError)
    if mode == 'SIGKILL':
        assert message == ('rank 0: a collective operation with the other ranks failed in '
                           'iteration 7 (RuntimeError in gloo): rank 1 (pid '
                           f'{ranks[1].pid}) is no longer running. ') + message.split('. ', 1)[1]
    else:  # a hung rank is not named: torch's timeout error stays
        assert message == 'None'
