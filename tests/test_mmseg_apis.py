"""mmseg's own APIs and tools on the project's configs and logs: ``init_model`` +
``inference_model`` (path and array) and ``MMSegInferencer`` (image, list, folder, out_dir) on every
config, without editing it; TensorBoard logging by its switch; mmseg's ``analyze_logs.py``.

B3 configs run at B0 width with a reduced test resize and sliding window, as a user would set
them with ``--cfg-options`` (tests/test_b3_configs.py does the same); the real Cityscapes frame is
scaled back up to 2048x1024 so that the prediction has the size of a full frame. The APIs run on
the demo config and one B3 config; every other B3 config is shown to differ from that one in its
mixers alone (each mixer's inference at these windows is tests/test_b3_configs.py's), so the APIs
see nothing else new there.
"""
import glob
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS

from afno_seg.backbones.mixer_mit import ARCH_SETTINGS

from conftest import TINY_CONFIG, save_segmentor_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(os.environ.get('AFNO_SEG_CITYSCAPES_SAMPLE',
                             ROOT.parent / 'shared' / 'data' / 'cityscapes_sample'))
FRAME = SAMPLE / 'leftImg8bit' / 'val' / 'frankfurt' / 'frankfurt_000000_000294_leftImg8bit.png'


def config_id(path: str) -> str:
    return osp.basename(path)[:-3]


B3_CONFIGS = sorted(glob.glob(str(ROOT / 'configs' / '*.py')))
API_CONFIGS = [str(ROOT / 'configs' / 'demo' / 'segformer_afno_demo.py'),
               str(ROOT / 'configs' / 'segformer_afno_b3_cityscapes.py')]


def config_cases():
    return [pytest.param(path, id=config_id(path)) for path in API_CONFIGS]

# Only the API runs read the frame; the rest of the file runs without ../shared.
needs_frame = pytest.mark.skipif(not FRAME.is_file(), reason=f'no Cityscapes frame at {FRAME}')


def reduced(path: str) -> Config:
    """The config with ``--cfg-options``-style overrides: B0 width and a 256x128 test resize
    with 128x128 windows for the B3 configs; the demo config as it is."""
    cfg = Config.fromfile(path)
    if cfg.model.backbone.get('arch') == 'b3':
        sizes = ARCH_SETTINGS['b0']
        cfg.model.backbone.arch = 'b0'
        cfg.model.backbone.init_cfg = None
        cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
        cfg.model.decode_head.channels = 64
        cfg.model.test_cfg = dict(mode='slide', crop_size=(128, 128), stride=(96, 96))
        for pipeline in (cfg.test_pipeline, cfg.test_dataloader.dataset.pipeline):
            resize = [t for t in pipeline if t.type == 'Resize'][0]
            resize.scale = (256, 128)
    return cfg


def checkpoint_of(cfg: Config, path: Path) -> str:
    """A checkpoint of the randomly initialised model, in mmengine's layout with dataset_meta."""
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return save_segmentor_checkpoint(model, path)


@pytest.fixture(scope='module')
def full_frame(tmp_path_factory) -> str:
    """The real frame scaled back to Cityscapes' 2048x1024."""
    image = cv2.resize(cv2.imread(str(FRAME)), (2048, 1024), interpolation=cv2.INTER_LINEAR)
    path = tmp_path_factory.mktemp('frame') / 'frankfurt_000000_000294_leftImg8bit.png'
    cv2.imwrite(str(path), image)
    return str(path)


def without_mixers(cfg: Config) -> dict:
    """The config as a dict without what names or configures the token mixers."""
    values = {k: v for k, v in cfg.to_dict().items() if not k.endswith('_mixer')}
    del values['model']['backbone']['mixers']
    return values


def test_b3_configs_differ_from_the_api_config_in_their_mixers_alone():
    reference = without_mixers(reduced(API_CONFIGS[1]))
    assert len(B3_CONFIGS) >= 8
    for path in B3_CONFIGS:
        assert without_mixers(reduced(path)) == reference, config_id(path)


@needs_frame
@pytest.mark.parametrize('path', config_cases())
def test_init_model_and_inference_model_on_path_and_array(path, full_frame, tmp_path):
    from mmseg.apis import inference_model, init_model
    cfg = reduced(path)
    model = init_model(cfg, checkpoint_of(cfg, tmp_path / 'model.pth'), device='cpu')
    from_path = inference_model(model, full_frame).pred_sem_seg.data
    assert tuple(from_path.shape) == (1, 1024, 2048)
    assert 0 <= from_path.min() and from_path.max() < 19
    from_array = inference_model(model, cv2.imread(full_frame)).pred_sem_seg.data
    assert torch.equal(from_path, from_array)


@needs_frame
@pytest.mark.parametrize('path', config_cases())
def test_mmseg_inferencer_on_image_list_and_folder(path, full_frame, tmp_path):
    from mmseg.apis import MMSegInferencer
    cfg = reduced(path)
    inferencer = MMSegInferencer(cfg, weights=checkpoint_of(cfg, tmp_path / 'model.pth'),
                                 device='cpu')
    single = inferencer(full_frame, return_datasamples=True)
    assert tuple(single.pred_sem_seg.data.shape) == (1, 1024, 2048)
    folder = tmp_path / 'images'
    (folder / 'a').mkdir(parents=True)
    small = cv2.imread(str(FRAME))
    for name in ('a/one.png', 'two.png'):
        cv2.imwrite(str(folder / name), small)
    listed = inferencer([str(folder / 'two.png'), str(FRAME)], return_datasamples=True)
    assert [tuple(s.pred_sem_seg.data.shape) for s in listed] == [(1, 128, 256)] * 2
    assert torch.equal(listed[0].pred_sem_seg.data, listed[1].pred_sem_seg.data)
    out = tmp_path / 'out'
    inferencer(str(folder / 'a'), out_dir=str(out))
    drawn = glob.glob(str(out / 'vis' / '*.png')) + glob.glob(str(out / 'vis' / '*.jpg'))
    assert len(drawn) == 1, os.listdir(out)
    assert cv2.imread(drawn[0]).shape[:2] == (128, 256)


def test_bad_label_still_fails_naming_the_file_in_evaluation(tiny_demo_data, tmp_path):
    """The label guard of the test pipeline still runs where a sample has a label."""
    from mmseg.registry import DATASETS

    from afno_seg.datasets.transforms import BadSampleError
    data = tmp_path / 'data'
    shutil.copytree(tiny_demo_data, data)
    cfg = Config.fromfile(TINY_CONFIG)
    cfg.val_dataloader.dataset.data_root = str(data)
    init_default_scope('mmseg')
    dataset = DATASETS.build(cfg.val_dataloader.dataset)
    label = dataset.get_data_info(1)['seg_map_path']
    seg = cv2.imread(label, cv2.IMREAD_UNCHANGED)
    seg[:2, :2] = 40
    cv2.imwrite(label, seg)
    os.remove(dataset.get_data_info(2)['seg_map_path'])
    with pytest.raises(BadSampleError, match=r'label values \[40\] are outside the 19 classes'):
        dataset[1]
    with pytest.raises(BadSampleError, match='label map file not found') as missing:
        dataset[2]
    assert str(missing.value).startswith(dataset.get_data_info(2)['seg_map_path'])
    assert dataset[0]['data_samples'].gt_sem_seg.data.shape[-2:] == (64, 128)


@pytest.fixture(scope='module')
def tensorboard_run(tiny_trained):
    """conftest's shared tools/train.py run of the tiny config: the TensorBoard switch is on."""
    return tiny_trained.work_dir, tiny_trained.result


def test_tensorboard_switch_writes_the_training_scalars(tensorboard_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    work_dir, _ = tensorboard_run
    events = glob.glob(str(work_dir / '*' / 'vis_data' / 'events.out.tfevents.*'))
    assert len(events) == 1, events
    accumulator = EventAccumulator(events[0])
    accumulator.Reload()
    steps = [event.step for event in accumulator.Scalars('loss')]
    assert steps == [1, 2, 3, 4, 5, 6]  # logger interval 1, 6 iterations
    (json_log, ) = glob.glob(str(work_dir / '*' / 'vis_data' / '2*.json'))
    logged = [json.loads(line) for line in open(json_log)]
    losses = [entry['loss'] for entry in logged if 'loss' in entry]
    np.testing.assert_allclose([e.value for e in accumulator.Scalars('loss')], losses, rtol=1e-5)
    assert 'mIoU' in accumulator.Tags()['scalars']


def test_mmseg_analyze_logs_plots_our_json_log(tensorboard_run, tmp_path):
    import mmseg
    work_dir, _ = tensorboard_run
    (json_log, ) = glob.glob(str(work_dir / '*' / 'vis_data' / '2*.json'))
    script = osp.join(osp.dirname(mmseg.__file__), '.mim', 'tools', 'analysis_tools',
                      'analyze_logs.py')
    out = tmp_path / 'curves.png'
    result = subprocess.run([sys.executable, script, json_log, '--keys', 'loss', 'mIoU',
                             '--backend', 'agg', '--out', str(out)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'metric is loss' in result.stdout and 'metric is mIoU' in result.stdout
    image = cv2.imread(str(out))
    assert image is not None and image.shape[0] > 100 and image.std() > 1  # a drawn figure

