"""tools/inference.py cannot overwrite, loop or stall (issue 35): output names that keep each
input's path and never collide, symlink loops cut, an output folder inside an input refused, a
per-image pixel cap, a journal tied to the run's settings that survives damage, write errors and
failed videos as one input's failure, temporary files cleared only by their own host.

The tool runs in-process (its ``main``) on two or three tiny images; the video case drives
:func:`segment_files` with a stand-in segmenter that fails on the second frame.
"""
import hashlib
import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from test_mmseg_apis import checkpoint_of

from afno_seg.deployment import collect_inputs
from afno_seg.deployment.files import InputFile
from afno_seg.deployment.segment_files import PROGRESS_DIR, completed_inputs, segment_files
from afno_seg.engine import atomic_io
from afno_seg.engine.checkpoint import load_checkpoint_file
from afno_seg.engine.errors import UserError

from conftest import TINY_CONFIG, load_script


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> str:
    return checkpoint_of(Config.fromfile(TINY_CONFIG), tmp_path_factory.mktemp('ckpt') / 'm.pth')


@pytest.fixture(scope='module')
def inference_tool():
    return load_script('tools/inference.py')


@pytest.fixture(scope='module')
def frame(tiny_demo_data) -> np.ndarray:
    return cv2.imread(str(sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))[0]))


def tree(root: Path, frame, *names) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / name), frame)
    return root


def run(tool, checkpoint, *argv, config=TINY_CONFIG):
    return tool.main([config, checkpoint, *map(str, argv), '--workers', '0', '--no-progress'])


# -- names, symlinks, the output folder ---------------------------------------------------------

def test_names_keep_paths_and_symlinks_neither_repeat_nor_loop(frame, tmp_path):
    p = tree(tmp_path / 'p', frame, '2023/img.png', '2024/img.png')
    pattern = str(p / '*' / 'img.png')
    assert [i.name for i in collect_inputs([pattern])] == ['2023/img', '2024/img']
    tree(p, frame, '2025/img.png')  # one more: the others keep their names
    assert [i.name for i in collect_inputs([pattern])] == ['2023/img', '2024/img', '2025/img']
    assert [i.name for i in collect_inputs([str(p / '**' / 'img.png')])][:1] == ['2023/img']
    with pytest.raises(UserError, match='would both be written as img: pass the folder'):
        collect_inputs([str(p / '2023' / 'img.png'), str(p / '2024' / 'img.png')])
    (p / '2023' / 'loop').symlink_to(p, target_is_directory=True)
    (p / 'same.png').symlink_to(p / '2024' / 'img.png')
    for spec in (str(p), str(p / '**' / '*.png')):
        found = collect_inputs([spec])
        assert len(found) == 3, [i.path for i in found]  # the link loop cut, same.png is 2024
        assert len({os.path.realpath(i.path) for i in found}) == 3


def test_an_output_folder_in_an_input_is_refused(inference_tool, checkpoint, frame, tmp_path):
    p = tree(tmp_path / 'p', frame, 'a.png')
    for out in (p, p / 'out'):
        with pytest.raises(UserError, match='inside the input folder .*choose a folder outside'):
            run(inference_tool, checkpoint, str(p / '*.png'), '--out-dir', out)
    tree(tmp_path / 'out', frame, 'labels/a.png')
    with pytest.raises(UserError, match='is inside --out-dir'):
        run(inference_tool, checkpoint, tmp_path / 'out' / 'labels' / 'a.png', '--out-dir',
            tmp_path / 'out')
    assert not (p / 'labels').exists() and not (p / 'out').exists()


# -- the pixel cap, write errors, the closing line ------------------------------------------------

def test_large_images_and_unwritable_names_fail_alone(inference_tool, checkpoint, frame,
                                                       tmp_path, capsys):
    big = cv2.resize(frame, (frame.shape[1] * 2, frame.shape[0] * 2))
    p = tree(tmp_path / 'p', frame, 'a.png', 'b' * 240 + '.png')  # its temp name is too long
    cv2.imwrite(str(p / 'big.png'), big)
    out = tmp_path / 'out'
    cap = frame.shape[0] * frame.shape[1]
    with pytest.raises(UserError, match='2 of 3 inputs failed') as error:
        run(inference_tool, checkpoint, p, '--out-dir', out, '--max-pixels', cap)
    assert '--resume' not in str(error.value)
    captured = capsys.readouterr()
    assert f'big.png: 256x128 (32,768 pixels) is over the cap of {cap:,} pixels' in captured.err
    assert 'cannot write its outputs' in captured.err and '--resume' not in captured.err
    assert 'summary.json, labels/, overlays/)' in captured.out  # no videos/: none was written
    assert sorted(f.name for f in (out / 'labels').iterdir()) == ['a.png']
    failed = {Path(e['input']).name: e['error'] for e in json.loads(
        (out / 'summary.json').read_text())['inputs'] if e['status'] == 'failed'}
    assert set(failed) == {'big.png', 'b' * 240 + '.png'}


# -- the journal belongs to its settings ----------------------------------------------------------

def test_a_rerun_with_another_checkpoint_redoes_and_a_moved_one_resumes(inference_tool, checkpoint,
                                                                    frame, tmp_path, capsys,
                                                                    monkeypatch):
    p = tree(tmp_path / 'p', frame, 'a.png', 'sub/b.png')
    out = tmp_path / 'out'

    def resumed(*argv, cwd=tmp_path):
        monkeypatch.chdir(cwd)
        run(inference_tool, checkpoint, *argv)
        return json.loads((out / 'summary.json').read_text())['num_resumed']

    assert resumed(p, '--out-dir', out) == 0
    assert resumed('..', '--out-dir', out, cwd=p / 'sub') == 2  # same real paths, other cwd
    other = load_checkpoint_file(checkpoint)
    other['meta']['note'] = 'same weights, another file: another run'
    torch.save(other, tmp_path / 'other.pth')
    monkeypatch.chdir(tmp_path)
    inference_tool.main([TINY_CONFIG, str(tmp_path / 'other.pth'), str(p), '--out-dir', str(out),
                         '--workers', '0', '--no-progress'])
    assert json.loads((out / 'summary.json').read_text())['num_resumed'] == 0
    capsys.readouterr()


def test_damaged_journal_lines_are_named_and_skipped(tmp_path, capsys):
    out = tmp_path / 'out'
    (out / PROGRESS_DIR).mkdir(parents=True)
    label = tmp_path / 'x.png'
    label.write_bytes(b'png')
    good = dict(input='x.png', real=str(tmp_path / 'x.png'), status='ok', label=str(label))
    lines = [json.dumps(dict(rank=0, host='h', pid=1)).encode(), b'[1, 2]',
             b'\xff\xfe not utf-8', json.dumps(dict(input=3, status='ok')).encode(),
             json.dumps(dict(input='y.png', status='ok', label=7)).encode(),
             json.dumps(good).encode(), b'{"input": "cut by a ki']
    (out / PROGRESS_DIR / 'r-rank0.jsonl').write_bytes(b'\n'.join(lines))
    assert list(completed_inputs(str(out))) == [str(tmp_path / 'x.png')]
    err = capsys.readouterr().err
    assert '4 damaged line(s) skipped (first: line 2)' in err and 'Traceback' not in err
    assert completed_inputs(str(out), settings='other') == {}


# -- videos, temporary files ----------------------------------------------------------------------

class FailingSegmenter:
    """Stands in for a Segmenter: the second chunk of frames fails."""
    prepare = None  # no images to prepare

    def __init__(self):
        self.model = SimpleNamespace(dataset_meta=dict(classes=['a', 'b'],
                                                       palette=[[0, 0, 0], [255, 0, 0]]))
        self.calls = 0

    def __call__(self, frames):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError('out of memory (simulated)')
        return [SimpleNamespace(label=np.zeros(f.shape[:2], np.uint8), seconds=0.0)
                for f in frames]


def test_a_video_that_fails_midway_leaves_no_file(frame, tmp_path, capsys):
    video = tmp_path / 'clip.mp4'
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*'mp4v'), 5.0,
                             (frame.shape[1], frame.shape[0]))
    for _ in range(3):
        writer.write(frame)
    writer.release()
    out = tmp_path / 'out'
    summary = segment_files(FailingSegmenter(), [InputFile(str(video), 'clip', True)], str(out),
                            progress=False)
    assert summary['num_failed'] == 1 and 'failed at frame 1' in summary['inputs'][0]['error']
    assert os.listdir(out / 'videos') == []  # neither the final name nor a temporary file
    assert 'skipped' in capsys.readouterr().err


def test_temporary_files_are_cleared_only_by_their_own_host(tmp_path):
    dead = 2 ** 22 + 12345  # above any pid_max: no such process
    host = 'h' + hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
    ours = tmp_path / f'.a.png.{dead}.0badc0de.{host}.tmp'  # atomic_io.temp_name's form
    theirs = tmp_path / f'.b.png.{dead}.0badc0de.h000000.tmp'  # another host's live rank, maybe
    for path in (ours, theirs):
        path.write_bytes(b'')
    assert atomic_io.remove_stale_temp_files(tmp_path) == [str(ours)]
    assert theirs.exists()
