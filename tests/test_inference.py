"""tools/inference.py end to end on the tiny config: images from folders and globs, a video, the
outputs against mmseg's ``inference_model``, labelIds, onnxruntime against PyTorch, and one clear
line for every bad input; tools/test.py names a bad checkpoint before the Runner's log."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from test_mmseg_apis import checkpoint_of

from afno_seg.deployment import collect_inputs, export_onnx, set_inference_mode
from afno_seg.engine.errors import UserError

from conftest import TINY_CONFIG, check, run_tool

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> str:
    return checkpoint_of(Config.fromfile(TINY_CONFIG), tmp_path_factory.mktemp('ckpt') / 'm.pth')


@pytest.fixture(scope='module')
def images(tiny_demo_data, tmp_path_factory) -> Path:
    """Four val images in two nested folders, one of another size, and a non-image file."""
    folder = tmp_path_factory.mktemp('images')
    sources = sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))
    (folder / 'city' / 'deep').mkdir(parents=True)
    for index, source in enumerate(sources[:3]):
        target = folder / ('city/deep' if index == 2 else 'city') / f'frame{index}.png'
        target.write_bytes(source.read_bytes())
    odd = cv2.resize(cv2.imread(str(sources[3])), (100, 60))
    cv2.imwrite(str(folder / 'odd.jpg'), odd)
    (folder / 'notes.txt').write_text('not an image')
    return folder


def write_video(path: Path, frames: list[np.ndarray], fps: float = 5.0) -> None:
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'mp4v'), fps, (width, height))
    for frame in frames:
        writer.write(frame)
    writer.release()


def mmseg_prediction(checkpoint: str, image_path: str) -> np.ndarray:
    from mmseg.apis import inference_model, init_model
    model = init_model(Config.fromfile(TINY_CONFIG), checkpoint, device='cpu')
    return inference_model(model, image_path).pred_sem_seg.data[0].numpy()


def test_collect_inputs_folders_globs_and_names(images):
    found = collect_inputs([str(images), str(images / 'city' / '*.png')])
    names = [item.name for item in found]
    assert names == ['odd', 'city/frame0', 'city/frame1', 'city/deep/frame2']  # each file once
    assert [item.name for item in collect_inputs([str(images / '**' / 'frame2.png')])] == [
        'frame2']
    with pytest.raises(UserError, match='no image .* or video'):
        collect_inputs([str(images / '*.bmp')])
    with pytest.raises(UserError, match='input not found: /no/such.png'):
        collect_inputs(['/no/such.png'])


def test_inference_tool_writes_labels_overlays_and_summary(checkpoint, images, tmp_path):
    out = tmp_path / 'out'
    result = check(run_tool('tools/inference.py', TINY_CONFIG, checkpoint, str(images),
                            '--out-dir', str(out), '--batch-size', '2', '--opacity', '0.6'))
    assert 'pkg_resources' not in result.stderr  # the one warning filtered at start-up
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['num_inputs'] == 4 and summary['backend'] == 'pytorch'
    for entry in summary['inputs']:
        label = cv2.imread(entry['label'], cv2.IMREAD_UNCHANGED)
        image = cv2.imread(entry['input'])
        assert label.shape == image.shape[:2] == (entry['height'], entry['width'])
        # The same map as mmseg's own inference_model on the file.
        assert np.array_equal(label, mmseg_prediction(checkpoint, entry['input']))
        from mmseg.datasets import CityscapesDataset
        classes = CityscapesDataset.METAINFO['classes']
        assert entry['classes'] == [classes[i] for i in np.unique(label)]
        palette = np.asarray(CityscapesDataset.METAINFO['palette'])[:, ::-1]
        expected = np.clip(0.4 * image + 0.6 * palette[label] + 0.5, 0, 255).astype(np.uint8)
        assert np.abs(cv2.imread(entry['overlay']).astype(int) - expected).max() <= 1
        assert entry['seconds'] > 0
    assert (out / 'overlays' / 'city' / 'deep' / 'frame2.png').is_file()


def test_cityscapes_format_writes_label_ids(checkpoint, images, tmp_path):
    image = str(images / 'city' / 'frame0.png')
    check(run_tool('tools/inference.py', TINY_CONFIG, checkpoint, image, '--out-dir',
                   str(tmp_path), '--format', 'cityscapes', '--no-progress'))
    label_ids = cv2.imread(str(tmp_path / 'labels' / 'frame0.png'), cv2.IMREAD_UNCHANGED)
    train_ids = mmseg_prediction(checkpoint, image)
    # Cityscapes labels.py: trainId 0 road -> 7, 1 sidewalk -> 8, 2 building -> 11, 10 sky -> 23.
    official = {0: 7, 1: 8, 2: 11, 3: 12, 4: 13, 5: 17, 6: 19, 7: 20, 8: 21, 9: 22, 10: 23,
                11: 24, 12: 25, 13: 26, 14: 27, 15: 28, 16: 31, 17: 32, 18: 33}
    assert np.array_equal(label_ids, np.vectorize(official.get)(train_ids))


def test_video_in_overlay_video_out(checkpoint, tiny_demo_data, tmp_path):
    frames = [cv2.imread(str(p)) for p in sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))]
    video = tmp_path / 'clip.mp4'
    write_video(video, frames)
    out = tmp_path / 'out'
    check(run_tool('tools/inference.py', TINY_CONFIG, checkpoint, str(video), '--out-dir',
                   str(out), '--batch-size', '3'))
    (entry, ) = json.loads((out / 'summary.json').read_text())['inputs']
    assert entry['frames'] == len(frames) and entry['fps'] == pytest.approx(5.0)
    capture = cv2.VideoCapture(entry['video'])
    written = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        written.append(frame)
    assert len(written) == len(frames) and written[0].shape == frames[0].shape


def test_onnxruntime_backend_matches_pytorch(checkpoint, images, tmp_path):
    from mmseg.apis import init_model
    model = init_model(Config.fromfile(TINY_CONFIG), checkpoint, device='cpu')
    onnx_file = export_onnx(model, (64, 128), str(tmp_path / 'tiny.onnx'))  # the test resize
    outputs = {}
    for backend in ('pytorch', 'onnxruntime'):
        extra = ['--backend', backend] + (['--onnx', onnx_file] if backend != 'pytorch' else [])
        check(run_tool('tools/inference.py', TINY_CONFIG, checkpoint, str(images / 'city'),
                       '--out-dir', str(tmp_path / backend), *extra))
        outputs[backend] = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
                            for p in sorted((tmp_path / backend / 'labels').rglob('*.png'))]
    assert len(outputs['pytorch']) == 3
    for torch_label, ort_label in zip(outputs['pytorch'], outputs['onnxruntime']):
        assert np.mean(torch_label == ort_label) >= 0.999
    # A static graph and an image of another size: one clear line.
    result = run_tool('tools/inference.py', TINY_CONFIG, checkpoint, str(images / 'odd.jpg'),
                      '--out-dir', str(tmp_path / 'odd'), '--backend', 'onnxruntime',
                      '--onnx', onnx_file, '--no-progress')
    assert result.returncode == 1 and 'takes 64x128 inputs' in result.stderr
    assert 'Traceback' not in result.stderr


def expect_one_line_error(result, *fragments, alone=True):
    """Exit code 1, no traceback, the message on the last line (``alone``: the only line; an
    image is read after the model is built, whose mmseg warnings may come first)."""
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert 'Traceback' not in result.stderr and len(result.stdout.splitlines()) <= 2
    assert len(lines) == 1 if alone else len(lines) <= 8, result.stderr[-3000:]
    assert lines[-1].startswith('error: ')
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]


@pytest.mark.parametrize('case', [
    'garbage checkpoint', 'bad image', 'empty folder',
    *(pytest.param(case, marks=pytest.mark.slow)
      for case in ('missing checkpoint', 'missing input', 'cuda without a GPU'))])
def test_bad_inputs_are_one_clear_line(case, checkpoint, images, tmp_path):
    good_image = str(images / 'city' / 'frame0.png')
    arguments, fragments = [checkpoint, good_image], []
    if case == 'missing checkpoint':
        arguments, fragments = [str(tmp_path / 'nope.pth'), good_image], ['nope.pth', 'not found']
    elif case == 'garbage checkpoint':
        (tmp_path / 'garbage.pth').write_bytes(b'\x00junk' * 100)
        arguments = [str(tmp_path / 'garbage.pth'), good_image]
        fragments = ['garbage.pth', 'not a readable PyTorch checkpoint']
    elif case == 'bad image':
        data = Path(good_image).read_bytes()
        (tmp_path / 'cut.png').write_bytes(data[:len(data) // 3])
        arguments = [checkpoint, str(tmp_path / 'cut.png')]
        fragments = ['cut.png', 'image cannot be decoded']
    elif case == 'empty folder':
        (tmp_path / 'empty').mkdir()
        arguments, fragments = [checkpoint, str(tmp_path / 'empty')], ['empty', 'no image']
    elif case == 'missing input':
        arguments, fragments = [checkpoint, str(tmp_path / 'x.png')], ['input not found']
    elif torch.cuda.is_available():
        pytest.skip('a CUDA device is present')
    extra = ['--device', 'cuda'] if case == 'cuda without a GPU' else []
    if case == 'cuda without a GPU':
        fragments = ['no CUDA device']
    result = run_tool('tools/inference.py', TINY_CONFIG, *arguments, '--out-dir',
                      str(tmp_path / 'out'), *extra)
    expect_one_line_error(result, *fragments, alone=case != 'bad image')


def test_test_tool_names_a_bad_checkpoint_before_the_runner_log(tmp_path):
    garbage = tmp_path / 'garbage.pth'
    garbage.write_text('hello')
    result = run_tool('tools/test.py', TINY_CONFIG, str(garbage), '--work-dir', str(tmp_path))
    expect_one_line_error(result, 'garbage.pth', 'not a readable PyTorch checkpoint')
    assert not list(tmp_path.glob('2*'))  # no Runner: no timestamped log folder


def test_slide_mode_defaults_from_the_training_crop():
    cfg = Config.fromfile(TINY_CONFIG)
    set_inference_mode(cfg, 'slide')
    assert cfg.model.test_cfg == dict(mode='slide', crop_size=(64, 64), stride=(48, 48))
