"""Two torchrun "nodes" on one machine: two tools/dist_train.sh processes with NNODES=2,
NODE_RANK=0/1, one process each and MASTER_ADDR=127.0.0.1 train as one node with two processes
does (bitwise); when one node dies (its torchrun agent and its worker SIGKILLed), the other exits
with one line naming the lost rank, within a bound.
"""
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest
from test_dead_rank import dist_train, free_port
from test_preemption import MAX_ITERS, write_fault_config

from conftest import (
    ROOT,
    assert_same_training_state,
    cli_options,
    complete_checkpoint_named_by,
    data_roots,
    read_checkpoint,
    seam_env,
)

NODE_TIMEOUT_S = 400


def start_node(config, data_root, work_dir, folder: Path, node_rank: int, port: int,
               **variables) -> subprocess.Popen:
    """One node: ``NNODES=2 NODE_RANK=node_rank bash tools/dist_train.sh CONFIG 1``, in a session
    of its own, its output in ``folder/node<rank>.log``."""
    env = seam_env(folder, PYTHON=sys.executable, NNODES='2', NODE_RANK=str(node_rank),
                   MASTER_ADDR='127.0.0.1', PORT=str(port), SHUTDOWN_TIMEOUT='20', **variables)
    with open(folder / f'node{node_rank}.log', 'w') as log:
        return subprocess.Popen(
            ['bash', 'tools/dist_train.sh', config, '1', '--work-dir', str(work_dir),
             *cli_options({**data_roots(data_root), 'env_cfg.dist_cfg.timeout': 60})],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (torchrun starts its workers in sessions of their
    own, so a process group does not reach them)."""
    children: dict[int, list[int]] = {}
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def kill_node(node: subprocess.Popen) -> None:
    """SIGKILL a node's launcher, its torchrun and its worker, if still running."""
    if node.poll() is None:
        for pid in descendants(node.pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.wait()


def wait_all(nodes: list[subprocess.Popen], timeout: float = NODE_TIMEOUT_S) -> None:
    try:
        for node in nodes:
            node.wait(timeout=timeout)
    finally:
        for node in nodes:
            kill_node(node)


@pytest.mark.slow
def test_two_nodes_of_one_process_train_as_one_node_of_two(tiny_demo_data, tmp_path):
    config = write_fault_config(tmp_path)
    one_node = dist_train(config, tiny_demo_data, tmp_path / 'one_node', tmp_path)
    assert one_node.returncode == 0, one_node.output[-3000:]
    port = free_port()
    nodes = [start_node(config, tiny_demo_data, tmp_path / 'two_nodes', tmp_path, rank, port)
             for rank in (0, 1)]
    wait_all(nodes)
    logs = [(tmp_path / f'node{rank}.log').read_text() for rank in (0, 1)]
    assert [node.returncode for node in nodes] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    run_log, = (tmp_path / 'two_nodes').glob('*/*.log')  # mmengine's record (not the console)
    assert 'GPU number: 2' in run_log.read_text()  # mmengine's word for the world size
    assert_same_training_state(read_checkpoint(tmp_path / 'two_nodes' / f'iter_{MAX_ITERS}.pth'),
                               read_checkpoint(tmp_path / 'one_node' / f'iter_{MAX_ITERS}.pth'))


@pytest.mark.slow
def test_a_killed_node_makes_the_other_exit_with_one_line(tiny_demo_data, tmp_path):
    """Node 1 (torchrun agent and worker) SIGKILLed once iteration 4 is saved: node 0's rank names
    rank 1
    as no longer running and node 0 exits non-zero within 60 s of the kill."""
    config = write_fault_config(tmp_path)
    work_dir = tmp_path / 'work'
    port = free_port()
    nodes = [start_node(config, tiny_demo_data, work_dir, tmp_path, rank, port) for rank in (0, 1)]
    node1_log = tmp_path / 'node1.log'
    try:
        deadline = time.monotonic() + NODE_TIMEOUT_S
        last = work_dir / 'last_checkpoint'
        while not (last.exists() and last.read_text().strip().endswith('iter_4.pth')):
            assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), \
                node1_log.read_text()[-3000:]
            time.sleep(0.02)
        kill_node(nodes[1])
        killed_at = time.monotonic()
        nodes[0].wait(timeout=120)
        elapsed = time.monotonic() - killed_at
    finally:
        for node in nodes:
            kill_node(node)
    output = (tmp_path / 'node0.log').read_text()
    assert nodes[0].returncode != 0
    assert re.search(r'error: rank 0: a collective operation with the other ranks failed in '
                     r'iteration \d+ \(.*\): rank 1 \(pid \d+\) is no longer running\. ',
                     output), output[-4000:]
    assert elapsed < 60, output[-4000:]
    assert complete_checkpoint_named_by(work_dir) == 4
