"""tools/inference.py at dataset scale: bad files and a SIGKILL lose nothing and redo nothing,
two torchrun processes write the labels of one, a dead rank's share is finished by a rerun, and
rank 0 merges the journals only once every rank ended or died.

Split from tests/test_inference.py (one file per behaviour, each under 450 lines).
"""
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from test_mmseg_apis import checkpoint_of

from afno_seg.engine.errors import UserError

from conftest import ROOT, TINY_CONFIG, load_script, seam_env, wait_for


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> str:
    return checkpoint_of(Config.fromfile(TINY_CONFIG), tmp_path_factory.mktemp('ckpt') / 'm.pth')


@pytest.fixture(scope='module')
def inference_tool():
    return load_script('tools/inference.py')


SEAM = '''
"""Test seam imported through custom_imports: slow PNG writes, or a rank that kills itself."""
import os, signal, time
from afno_seg.engine import atomic_io

DELAY = float(os.environ.get('AFNO_TEST_WRITE_DELAY', '0'))
KILL = os.environ.get('AFNO_TEST_KILL', '')  # RANK@N: that rank SIGKILLs itself at its N-th image
written = 0
LATE = os.environ.get('AFNO_TEST_LATE', '')  # RANK@S: that rank starts S seconds late
if LATE and LATE.partition('@')[0] == os.environ.get('RANK', '0'):
    time.sleep(float(LATE.partition('@')[2]))


def _write_all(file, data, path):
    global written
    if path.endswith('.png'):
        written += 1
        rank, _, count = KILL.partition('@')
        if KILL and rank == os.environ.get('RANK', '0') and written > 2 * int(count):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(DELAY)
    file.write(data)


atomic_io._write_all = _write_all
'''


@pytest.fixture(scope='module')
def forty(tiny_demo_data, tmp_path_factory):
    """40 images (the 4 val frames shifted) with 2 corrupt, their train-id labels, and a config
    importing the test seam: (folder, labels, config, seam folder)."""
    root = tmp_path_factory.mktemp('forty')
    (root / 'in').mkdir()
    (root / 'gt').mkdir()
    frames = sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))
    for index in range(40):
        source = frames[index % 4]
        image = np.roll(cv2.imread(str(source)), 3 * index, axis=1)
        gt = cv2.imread(str(source).replace('leftImg8bit', 'gtFine').replace(
            'gtFine.png', 'gtFine_labelTrainIds.png'), cv2.IMREAD_UNCHANGED)
        cv2.imwrite(str(root / 'in' / f'img{index:02d}.png'), image)
        cv2.imwrite(str(root / 'gt' / f'img{index:02d}.png'), np.roll(gt, 3 * index, axis=1))
    for index in (7, 23):  # truncated in the middle of the data
        path = root / 'in' / f'img{index:02d}.png'
        path.write_bytes(path.read_bytes()[:200])
    (root / 'inference_seam.py').write_text(SEAM)
    config = root / 'seamed.py'
    config.write_text(textwrap.dedent(f'''
        _base_ = [{TINY_CONFIG!r}]
        custom_imports = dict(imports=['afno_seg', 'inference_seam'], allow_failed_imports=False)
        '''))
    return root / 'in', root / 'gt', str(config), root


def journal_lines(out: Path) -> list[dict]:
    lines = [json.loads(line) for path in (out / '.progress').glob('*.jsonl')
             for line in path.read_text().splitlines() if line.endswith('}')]
    return [line for line in lines if 'input' in line]  # not the header naming the process


@pytest.mark.slow
def test_bad_files_and_a_kill_lose_nothing_and_redo_nothing(forty, checkpoint, tmp_path):
    """40 images, 2 corrupt, PNG writes slowed: SIGKILL after a few images; the same command
    again finishes only the rest: 38 outputs, the 2 bad files named, exit status 1, a summary of
    all 40, the earlier outputs untouched; with --labels, the evaluation report."""
    folder, gt, config, seams = forty
    out = tmp_path / 'out'
    command = [sys.executable, 'tools/inference.py', config, checkpoint, str(folder), '--out-dir',
               str(out), '--workers', '2', '--batch-size', '2', '--no-progress']
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL,
                               env=seam_env(seams, AFNO_TEST_WRITE_DELAY='0.1'))
    try:
        assert wait_for(lambda: len(list((out / 'labels').glob('*.png'))) >= 6, process)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        process.kill()
    finished = {entry['input']: os.stat(entry['label']).st_mtime_ns
                for entry in journal_lines(out) if entry['status'] == 'ok'}
    assert 3 <= len(finished) < 38
    result = subprocess.run(command + ['--labels', str(gt), '--worst', '3'], cwd=ROOT,
                            env=seam_env(seams), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith('error: 2 of 40 inputs failed (first: ') and 'img07.png' in lines[
        -1] and 'summary.json' in lines[-1]
    skipped = [line for line in lines if line.startswith('skipped ')]
    assert len(skipped) == 2 and 'img07.png: image cannot be decoded' in skipped[0]
    assert 'img23.png' in skipped[1] and 'Traceback' not in result.stderr
    assert len(list((out / 'labels').glob('*.png'))) == len(list(
        (out / 'overlays').glob('*.png'))) == 38
    summary = json.loads((out / 'summary.json').read_text())
    assert (summary['num_inputs'], summary['num_done'], summary['num_failed']) == (40, 38, 2)
    assert summary['num_resumed'] == len(finished)
    assert [Path(e['input']).name for e in summary['inputs']] == [
        f'img{i:02d}.png' for i in range(40)]
    for entry in summary['inputs']:
        if entry['input'] in finished:  # not written again
            assert entry.get('resumed') and os.stat(entry['label']).st_mtime_ns == finished[
                entry['input']]
    assert not [p for p in out.rglob('*.tmp')]  # atomic writes: the kill left none visible
    page = (out / 'report' / 'report.html').read_text()
    assert 'confusion.png' in page and page.count('<figure>') == 3
    assert (out / 'report' / 'worst' / '03.png').is_file()


def dist_inference(config, checkpoint, folder, out, seams, **variables):
    from test_dead_rank import free_port
    env = seam_env(seams, PYTHON=sys.executable, PORT=str(free_port()), SHUTDOWN_TIMEOUT='30',
                   **variables)
    return subprocess.run(['bash', 'tools/dist_inference.sh', config, checkpoint, '2',
                           str(folder), '--out-dir', str(out), '--no-progress', '--workers', '1'],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


@pytest.mark.slow
def test_two_torchrun_processes_write_the_labels_of_one_and_a_dead_rank_is_finished_later(
        forty, inference_tool, checkpoint, tmp_path):
    folder, _, config, seams = forty
    with pytest.raises(UserError, match='2 of 40 inputs failed'):
        inference_tool.main([TINY_CONFIG, checkpoint, str(folder), '--out-dir',
                             str(tmp_path / 'one'), '--workers', '0', '--no-progress'])
    two = dist_inference(config, checkpoint, folder, tmp_path / 'two', seams)
    assert two.returncode != 0 and 'error: 2 of 40 inputs failed' in two.stderr, two.stderr[-3000:]
    ones = sorted((tmp_path / 'one' / 'labels').glob('*.png'))
    assert len(ones) == 38
    for path in ones:
        assert (tmp_path / 'two' / 'labels' / path.name).read_bytes() == path.read_bytes()
    summary = json.loads((tmp_path / 'two' / 'summary.json').read_text())
    assert summary['world_size'] == 2 and summary['num_done'] == 38
    # Rank 1 SIGKILLs itself at its 4th image: torchrun stops rank 0, which names what is left.
    # Slowed writes keep rank 0 busy with its 20 (40 PNGs against rank 1's 8) even when rank 1
    # starts seconds late on a loaded machine: had rank 0 finished first, nothing would stop it.
    dead = dist_inference(config, checkpoint, folder, tmp_path / 'dead', seams,
                          AFNO_TEST_KILL='1@4', AFNO_TEST_WRITE_DELAY='0.5')
    assert dead.returncode != 0
    summary = json.loads((tmp_path / 'dead' / 'summary.json').read_text())
    left = [e for e in summary['inputs'] if e['status'] == 'not done']
    assert {e['rank'] for e in left} >= {1} and summary['stopped_by'] == 'SIGTERM'
    assert summary['dead_ranks'] == [1] and 'rank 1 died' in dead.stderr
    assert f'rank 1 left {sum(e["rank"] == 1 for e in left)}' in dead.stderr, dead.stderr[-3000:]
    assert 'rerun the same command to finish only those' in dead.stderr
    # Rank 0 starts late: rank 1 has finished images by then, which are not `resumed` (they are
    # this run's: resumed is what an earlier run's journal holds, not what rank 0 saw at start).
    rerun = dist_inference(config, checkpoint, folder, tmp_path / 'dead', seams,
                           AFNO_TEST_LATE='0@4')
    summary = json.loads((tmp_path / 'dead' / 'summary.json').read_text())
    assert 'error: 2 of 40 inputs failed' in rerun.stderr
    assert summary['num_done'] == 38 and summary['num_resumed'] == 38 - len(left) + sum(
        Path(e['input']).name in ('img07.png', 'img23.png') for e in left)
    for path in ones:
        assert (tmp_path / 'dead' / 'labels' / path.name).read_bytes() == path.read_bytes()


def test_rank_0_merges_only_after_every_rank_ended_or_died(tmp_path, monkeypatch):
    """Even when stopped itself, rank 0 waits for a live rank's end marker (its journal is then
    complete); a dead rank ends the wait at once; one never seen is given up after the grace."""
    module = importlib.import_module('afno_seg.deployment.segment_files')  # not the function
    prefix = str(tmp_path / 'run')
    header = dict(rank=1, host=module.socket.gethostname(), pid=os.getpid())
    Path(f'{prefix}-rank1.jsonl').write_text(json.dumps(header) + '\n')
    monkeypatch.setattr(module, 'STOP_GRACE_S', 30.0)
    stopped = SimpleNamespace(received=signal.SIGTERM)  # as StopSignals has it after a SIGTERM
    timer = module.threading.Timer(0.5, Path(f'{prefix}-rank1.end').write_text, ('SIGTERM',))
    timer.start()
    assert module._wait_for_ranks(prefix, 2, stopped) == []
    assert Path(f'{prefix}-rank1.end').exists()
    dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True, check=True)
    header['pid'] = int(dead.stdout)
    Path(f'{prefix}-rank2.jsonl').write_text(json.dumps(header) + '\n')
    assert module._wait_for_ranks(prefix, 3, SimpleNamespace(received=None)) == [2]
    monkeypatch.setattr(module, 'STOP_GRACE_S', 0.2)
    assert module._wait_for_ranks(prefix, 4, stopped) == [2]  # rank 3: no journal, no marker
