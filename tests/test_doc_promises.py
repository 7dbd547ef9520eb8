"""Promises of the docs that a one-line bug could break unseen (issue 43): the first node of a
multi-node Slurm step is the rendezvous address (docs/reliability.md), a video over
``--max-pixels`` is that input's named failure (docs/inference.md), same-named images from two
folders keep their own outputs (docs/inference.md). The https download is in
tests/test_https_checkpoints.py, ranks agreeing on a stop in tests/test_stop_agreement.py.
"""
import json
import os
import stat
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from mmseg.datasets import CityscapesDataset
from test_inference import mmseg_prediction, write_video
from test_mmseg_apis import checkpoint_of

from afno_seg.deployment.files import overlay
from afno_seg.engine.distributed import slurm_rendezvous_environment
from afno_seg.engine.errors import UserError

from conftest import TINY_CONFIG, load_script

# -- Slurm: several nodes ------------------------------------------------------------------------

#: ``scontrol show hostnames LIST`` for the one list this step has; any other list is an error, as
#: scontrol's for a list it cannot parse. Each call is appended to ``$0.calls``.
FAKE_SCONTROL = '''#!/bin/sh
echo "$*" >> "$0.calls"
if [ "$1 $2 $3" = 'show hostnames node[3-4,7]' ]; then printf 'node3\\nnode4\\nnode7\\n'; exit 0; fi
echo "scontrol: error: Invalid hostlist: $3" >&2
exit 1
'''


@pytest.fixture
def slurm_step(tmp_path, monkeypatch) -> Path:
    """Task 4 of 6 (local id 1) of job 4242 on nodes ``node[3-4,7]``, a fake scontrol on PATH."""
    for name in ('MASTER_ADDR', 'MASTER_PORT', 'SLURM_NODELIST'):
        monkeypatch.delenv(name, raising=False)
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    scontrol = bin_dir / 'scontrol'
    scontrol.write_text(FAKE_SCONTROL)
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv('PATH', f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
    for name, value in dict(SLURM_PROCID='4', SLURM_NTASKS='6', SLURM_LOCALID='1',
                            SLURM_JOB_ID='4242', SLURM_STEP_NODELIST='node[3-4,7]').items():
        monkeypatch.setenv(name, value)
    return scontrol


def test_a_multi_node_slurm_step_meets_at_its_first_node(slurm_step, monkeypatch):
    monkeypatch.setenv('SLURM_NODELIST', 'job[1-9]')  # the job's nodes: the step's win
    assert slurm_rendezvous_environment() == dict(
        RANK='4', WORLD_SIZE='6', LOCAL_RANK='1', MASTER_ADDR='node3', MASTER_PORT='29742')
    assert Path(f'{slurm_step}.calls').read_text() == 'show hostnames node[3-4,7]\n'


def test_a_node_list_scontrol_cannot_expand_is_one_line(slurm_step, tmp_path, monkeypatch):
    monkeypatch.setenv('SLURM_STEP_NODELIST', 'node[3-')
    with pytest.raises(UserError) as error:
        slurm_rendezvous_environment()
    message = str(error.value)
    assert '\n' not in message and 'node[3-' in message and 'Invalid hostlist' in message, message
    assert 'set MASTER_ADDR' in message, message
    monkeypatch.setenv('PATH', str(tmp_path / 'nowhere'))  # no scontrol at all
    monkeypatch.setenv('SLURM_STEP_NODELIST', 'node[3-4,7]')
    with pytest.raises(UserError, match=r'cannot expand the node list node\[3-4,7\]') as error:
        slurm_rendezvous_environment()
    assert '\n' not in str(error.value) and 'scontrol' in str(error.value)


# -- tools/inference.py: a video over the cap, same-named inputs ---------------------------------

@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> str:
    return checkpoint_of(Config.fromfile(TINY_CONFIG), tmp_path_factory.mktemp('ckpt') / 'm.pth')


@pytest.fixture(scope='module')
def inference_tool():
    return load_script('tools/inference.py')


@pytest.fixture(scope='module')
def frames(tiny_demo_data) -> list[np.ndarray]:
    """Two different 128x64 val images (BGR)."""
    return [cv2.imread(str(path)) for path in sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))
            [:2]]


def infer(tool, checkpoint, *argv) -> None:
    tool.main([TINY_CONFIG, checkpoint, *map(str, argv), '--workers', '0', '--no-progress'])


def test_a_video_over_the_pixel_cap_fails_alone_and_leaves_no_file(inference_tool, checkpoint,
                                                                    frames, tmp_path, capsys):
    """The cap is an image's pixels; the video's frames have four times as many."""
    inputs = tmp_path / 'inputs'
    inputs.mkdir()
    cv2.imwrite(str(inputs / 'a.png'), frames[0])
    large = [cv2.resize(frame, (256, 128)) for frame in frames]
    write_video(inputs / 'clip.mp4', large)
    out, cap = tmp_path / 'out', frames[0].shape[0] * frames[0].shape[1]
    with pytest.raises(UserError, match='1 of 2 inputs failed'):
        infer(inference_tool, checkpoint, inputs, '--out-dir', out, '--max-pixels', cap)
    assert f'clip.mp4: 256x128 (32,768 pixels) is over the cap of {cap:,} pixels' in \
        capsys.readouterr().err
    status = {Path(e['input']).name: e['status'] for e in json.loads(
        (out / 'summary.json').read_text())['inputs']}
    assert status == {'a.png': 'ok', 'clip.mp4': 'failed'}
    assert (out / 'labels' / 'a.png').is_file()
    assert not (out / 'videos').exists() or not list((out / 'videos').iterdir())


def test_same_named_images_of_two_folders_keep_their_own_outputs(inference_tool, checkpoint,
                                                                  frames, tmp_path):
    root = tmp_path / 'inputs'
    for folder, frame in zip(('a', 'b'), frames):
        (root / folder).mkdir(parents=True)
        cv2.imwrite(str(root / folder / 'img.png'), frame)
    out = tmp_path / 'out'
    infer(inference_tool, checkpoint, root, '--out-dir', out)
    palette = np.asarray(CityscapesDataset.METAINFO['palette'])  # checkpoint_of's dataset_meta
    overlays = []
    for folder, frame in zip(('a', 'b'), frames):
        expected = mmseg_prediction(checkpoint, str(root / folder / 'img.png'))
        label = cv2.imread(str(out / 'labels' / folder / 'img.png'), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(label, expected), folder
        overlays.append(cv2.imread(str(out / 'overlays' / folder / 'img.png')))
        assert np.array_equal(overlays[-1], overlay(frame, expected, palette)), folder
    assert not np.array_equal(*overlays)  # the two outputs are told apart by their content
    assert sorted(str(p.relative_to(out)) for p in out.glob('*/**/*.png')) == [
        'labels/a/img.png', 'labels/b/img.png', 'overlays/a/img.png', 'overlays/b/img.png']

