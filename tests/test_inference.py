"""tools/inference.py end to end on the tiny config: images from folders and globs, a video, the
outputs against mmseg's ``inference_model``, labelIds, onnxruntime against PyTorch, and one clear
line for every bad input; tools/test.py names a bad checkpoint before the Runner's log
(resume, kills and shards: tests/test_inference_resume.py; output names, folders, caps and the
journal's settings: tests/test_inference_outputs.py).

One run of the tool as a process (images and a video: what a user runs, start-up warnings
included) and two for the one-line errors (before and after the model is built); the other
options call its ``main`` here: the process adds nothing to them.
"""
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

from conftest import TINY_CONFIG, check, load_script, run_tool


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


@pytest.fixture(scope='module')
def inference_tool():
    return load_script('tools/inference.py')


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
        'city/deep/frame2']  # a pattern keeps the tree below its fixed part
    with pytest.raises(UserError, match='no image .* or video'):
        collect_inputs([str(images / '*.bmp')])
    with pytest.raises(UserError, match='input not found: /no/such.png'):
        collect_inputs(['/no/such.png'])


@pytest.fixture(scope='module')
def segmented(checkpoint, images, tiny_demo_data, tmp_path_factory):
    """tools/inference.py as a process on the image folder and a 4-frame video:
    (out_dir, frames, completed process)."""
    folder = tmp_path_factory.mktemp('segmented')
    frames = [cv2.imread(str(p)) for p in sorted(tiny_demo_data.glob('leftImg8bit/val/*/*.png'))]
    video = folder / 'clip.mp4'
    write_video(video, frames)
    out = folder / 'out'
    result = check(run_tool('tools/inference.py', TINY_CONFIG, checkpoint, str(images), str(video),
                            '--out-dir', str(out), '--batch-size', '3', '--opacity', '0.6'))
    return out, frames, result


def test_inference_tool_writes_labels_overlays_and_summary(checkpoint, segmented):
    out, _, result = segmented
    assert 'pkg_resources' not in result.stderr  # the one warning filtered at start-up
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['num_inputs'] == 5 and summary['backend'] == 'pytorch'
    images = [entry for entry in summary['inputs'] if 'frames' not in entry]
    assert len(images) == 4
    for entry in images:
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


def test_cityscapes_format_writes_label_ids(inference_tool, checkpoint, images, tmp_path):
    image = str(images / 'city' / 'frame0.png')
    inference_tool.main([TINY_CONFIG, checkpoint, image, '--out-dir', str(tmp_path), '--format',
                         'cityscapes', '--no-progress'])
    label_ids = cv2.imread(str(tmp_path / 'labels' / 'frame0.png'), cv2.IMREAD_UNCHANGED)
    train_ids = mmseg_prediction(checkpoint, image)
    # Cityscapes labels.py: trainId 0 road -> 7, 1 sidewalk -> 8, 2 building -> 11, 10 sky -> 23.
    official = {0: 7, 1: 8, 2: 11, 3: 12, 4: 13, 5: 17, 6: 19, 7: 20, 8: 21, 9: 22, 10: 23,
                11: 24, 12: 25, 13: 26, 14: 27, 15: 28, 16: 31, 17: 32, 18: 33}
    assert np.array_equal(label_ids, np.vectorize(official.get)(train_ids))


def test_video_in_overlay_video_out(segmented):
    out, frames, _ = segmented
    (entry, ) = [e for e in json.loads((out / 'summary.json').read_text())['inputs']
                 if 'frames' in e]
    assert entry['frames'] == len(frames) and entry['fps'] == pytest.approx(5.0)
    capture = cv2.VideoCapture(entry['video'])
    written = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        written.append(frame)
    assert len(written) == len(frames) and written[0].shape == frames[0].shape


def test_onnxruntime_backend_matches_pytorch(inference_tool, checkpoint, images, segmented,
                                             tmp_path):
    from mmseg.apis import init_model
    model = init_model(Config.fromfile(TINY_CONFIG), checkpoint, device='cpu')
    onnx_file = export_onnx(model, (64, 128), str(tmp_path / 'tiny.onnx'))  # the test resize
    inference_tool.main([TINY_CONFIG, checkpoint, str(images / 'city'), '--out-dir',
                         str(tmp_path / 'ort'), '--backend', 'onnxruntime', '--onnx', onnx_file,
                         '--no-progress'])
    out, _, _ = segmented  # the PyTorch backend on the same images
    outputs = {}
    for backend, folder in (('pytorch', out / 'labels' / 'city'),
                            ('onnxruntime', tmp_path / 'ort' / 'labels')):
        outputs[backend] = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
                            for p in sorted(folder.rglob('*.png'))]
    assert len(outputs['pytorch']) == len(outputs['onnxruntime']) == 3
    for torch_label, ort_label in zip(outputs['pytorch'], outputs['onnxruntime']):
        assert np.mean(torch_label == ort_label) >= 0.999
    # A static graph and an image of another size: a clear error (one line from the tool).
    with pytest.raises(UserError, match='takes 64x128 inputs'):
        inference_tool.main([TINY_CONFIG, checkpoint, str(images / 'odd.jpg'), '--out-dir',
                             str(tmp_path / 'odd'), '--backend', 'onnxruntime', '--onnx',
                             onnx_file, '--no-progress'])


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


def bad_input_case(case, checkpoint, images, tmp_path) -> tuple[list[str], list[str]]:
    """(arguments, fragments of the message) of a bad command line."""
    good_image = str(images / 'city' / 'frame0.png')
    arguments = [TINY_CONFIG, checkpoint, good_image, '--out-dir', str(tmp_path / 'out')]
    if case == 'missing checkpoint':
        arguments[1] = str(tmp_path / 'nope.pth')
        return arguments, ['nope.pth', 'not found']
    if case == 'garbage checkpoint':
        (tmp_path / 'garbage.pth').write_bytes(b'\x00junk' * 100)
        arguments[1] = str(tmp_path / 'garbage.pth')
        return arguments, ['garbage.pth', 'not a readable PyTorch checkpoint']
    if case == 'bad image':
        data = Path(good_image).read_bytes()
        (tmp_path / 'cut.png').write_bytes(data[:len(data) // 3])
        arguments[2] = str(tmp_path / 'cut.png')
        return arguments, ['cut.png', 'image cannot be decoded']
    if case == 'empty folder':
        (tmp_path / 'empty').mkdir()
        arguments[2] = str(tmp_path / 'empty')
        return arguments, ['empty', 'no image']
    if case == 'missing input':
        arguments[2] = str(tmp_path / 'x.png')
        return arguments, ['input not found']
    if case == 'unwritable output folder':  # refused before the checkpoint is even read
        (tmp_path / 'a_file').write_text('')
        arguments[1], arguments[4] = str(tmp_path / 'nope.pth'), str(tmp_path / 'a_file' / 'out')
        return arguments, ['a_file/out is not writable', 'choose another folder']
    assert case == 'cuda without a GPU'
    return arguments + ['--device', 'cuda'], ['no CUDA device']


@pytest.mark.parametrize('case', ['garbage checkpoint', 'bad image'])
def test_bad_inputs_are_one_clear_line(case, checkpoint, images, tmp_path):
    """The process: before the model is built (a bad checkpoint) the message is all there is;
    after it (a bad image) it is the last line."""
    arguments, fragments = bad_input_case(case, checkpoint, images, tmp_path)
    result = run_tool('tools/inference.py', *arguments)
    expect_one_line_error(result, *fragments, alone=case != 'bad image')


@pytest.mark.parametrize('case', ['empty folder', 'missing checkpoint', 'missing input',
                                  'cuda without a GPU', 'unwritable output folder'])
def test_bad_inputs_are_named(case, inference_tool, checkpoint, images, tmp_path):
    """The other bad inputs raise the UserError that the tool prints as its one line."""
    if case == 'cuda without a GPU' and torch.cuda.is_available():
        pytest.skip('a CUDA device is present')
    arguments, fragments = bad_input_case(case, checkpoint, images, tmp_path)
    with pytest.raises(UserError) as error:
        inference_tool.main(arguments)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)


def test_slide_mode_defaults_from_the_training_crop():
    cfg = Config.fromfile(TINY_CONFIG)
    set_inference_mode(cfg, 'slide')
    assert cfg.model.test_cfg == dict(mode='slide', crop_size=(64, 64), stride=(48, 48))


# ------------------------------------------------------------------------ dataset scale

def test_batch_size_and_workers_never_change_the_labels(inference_tool, checkpoint, images,
                                                         segmented, tmp_path):
    """Batch 3 with 2 DataLoader workers (the process run: odd.jpg is another size, so batches
    are formed by size) against batch 1 in this process, without workers: the same bytes."""
    inference_tool.main([TINY_CONFIG, checkpoint, str(images), '--out-dir', str(tmp_path),
                         '--batch-size', '1', '--workers', '0', '--no-progress'])
    out, _, _ = segmented
    ours = sorted((tmp_path / 'labels').rglob('*.png'))
    assert len(ours) == 4
    classes = set()
    for path in ours:
        batched = out / 'labels' / path.relative_to(tmp_path / 'labels')
        assert batched.read_bytes() == path.read_bytes(), path
        classes.update(np.unique(cv2.imread(str(path), cv2.IMREAD_UNCHANGED)).tolist())
    assert len(classes) > 1  # labels that could differ


def test_strict_stops_at_the_first_bad_input(inference_tool, checkpoint, images, tmp_path):
    data = (images / 'city' / 'frame0.png').read_bytes()
    (tmp_path / 'in').mkdir()
    (tmp_path / 'in' / 'a_cut.png').write_bytes(data[:100])
    (tmp_path / 'in' / 'b.png').write_bytes(data)
    with pytest.raises(UserError, match='a_cut.png: image cannot be decoded.*without --strict'):
        inference_tool.main([TINY_CONFIG, checkpoint, str(tmp_path / 'in'), '--out-dir',
                             str(tmp_path / 'out'), '--strict', '--workers', '0',
                             '--no-progress'])
    assert not (tmp_path / 'out' / 'labels' / 'b.png').exists()
