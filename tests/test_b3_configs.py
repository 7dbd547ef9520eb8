"""The SegFormer-B3 Cityscapes configs: they build with the right mixers and recipe, and the full
segmentor trains (forward + backward) and infers (whole and sliding window, non-square) on a CPU.

Fast tests shrink the backbone to B0 through the configs' own ``arch`` (as a user would with
``--cfg-options model.backbone.arch=b0 ...``); the ``slow`` ones run B3 itself: every config at
a 64x128 crop, one at 256x512.
"""
import glob
import os.path as osp
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample

import afno_seg.backbones  # noqa: F401
from afno_seg.backbones.mixer_mit import ARCH_SETTINGS
from afno_seg.mixers import mixer_variants

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(glob.glob(str(ROOT / 'configs' / 'segformer_*_b3_cityscapes.py')))
MIXER_BASES = sorted(glob.glob(str(ROOT / 'configs' / '_base_' / 'mixers' / '*.py')))


def expected_mixers(name: str) -> list[dict]:
    """Per-stage mixer configs a B3 config's short name promises, from the catalogue:
    ``segformer_{variant}_b3`` has that variant in every stage; ``segformer_{a}-{b}-hybrid_b3``
    has variant ``a`` in stages 1-2 and ``b`` in stages 3-4."""
    variants = mixer_variants()
    if name.endswith('-hybrid'):
        first, second = name[:-len('-hybrid')].split('-')
        return [variants[first]] * 2 + [variants[second]] * 2
    return [variants[name]] * 4


def short_name(path: str) -> str:
    return osp.basename(path)[len('segformer_'):-len('_b3_cityscapes.py')]


@pytest.fixture(autouse=True)
def mmseg_scope():
    init_default_scope('mmseg')


def load_cfg(path: str, arch: str = 'b3', crop=(256, 512), head_channels=None) -> Config:
    """The config as a user would override it: smaller crop, optionally a smaller arch."""
    cfg = Config.fromfile(path)
    cfg.model.backbone.init_cfg = None
    cfg.model.data_preprocessor.size = crop
    if arch != 'b3':
        sizes = ARCH_SETTINGS[arch]
        cfg.model.backbone.arch = arch
        cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
    if head_channels:
        cfg.model.decode_head.channels = head_channels
    return cfg


def build(cfg: Config):
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def batch(height: int, width: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=generator)
    label = torch.randint(0, 19, (1, height, width), generator=generator)
    label[:, :4] = 255
    sample = SegDataSample(gt_sem_seg=PixelData(data=label))
    sample.set_metainfo(dict(img_shape=(height, width), ori_shape=(height, width),
                             pad_shape=(height, width)))
    return dict(inputs=[image], data_samples=[sample])


def train_step(model, height: int, width: int) -> float:
    model.train()
    data = model.data_preprocessor(batch(height, width), True)
    loss, _ = model.parse_losses(model(**data, mode='loss'))
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, f'{name} got no gradient'
        assert torch.isfinite(param.grad).all(), f'{name} has a non-finite gradient'
    return float(loss.detach())


def predict(model, height: int, width: int, test_cfg: dict) -> torch.Tensor:
    model.eval()
    model.test_cfg = Config(test_cfg)
    with torch.no_grad():
        (result, ) = model.test_step(batch(height, width, seed=1))
    return result.pred_sem_seg.data


def test_every_config_is_named_after_catalogue_variants():
    assert len(CONFIGS) >= 8
    for path in CONFIGS:
        assert len(expected_mixers(short_name(path))) == 4  # a KeyError names an unknown variant


@pytest.mark.parametrize('path', MIXER_BASES, ids=osp.basename)
def test_mixer_bases_define_the_catalogue_variants(path):
    """``configs/_base_/mixers/{name}.py`` defines ``{name}_mixer``, equal to the catalogue's."""
    name = osp.basename(path)[:-len('.py')]
    assert Config.fromfile(path)[f'{name}_mixer'] == mixer_variants()[name]


def test_base_recipe():
    """mmseg's SegFormer-B3 Cityscapes 1024x1024 recipe, in fp16, written into the base."""
    cfg = Config.fromfile(CONFIGS[0])
    assert cfg.default_scope == 'mmseg'
    assert cfg.custom_imports == dict(imports=['afno_seg'], allow_failed_imports=False)
    assert cfg.train_dataloader.dataset.data_root == 'data/cityscapes/'
    assert cfg.train_dataloader.batch_size == 1 and cfg.auto_scale_lr.base_batch_size == 8
    assert cfg.auto_scale_lr.enable is False
    optim = cfg.optim_wrapper
    assert optim.type == 'AmpOptimWrapper' and optim.loss_scale == 'dynamic'
    assert optim.optimizer.type == 'AdamW' and optim.optimizer.lr == 6e-5
    assert optim.optimizer.weight_decay == 0.01
    assert optim.paramwise_cfg.custom_keys == {
        'pos_block': dict(decay_mult=0.), 'norm': dict(decay_mult=0.),
        'head': dict(lr_mult=10.)}
    warmup, poly = cfg.param_scheduler
    assert (warmup.type, warmup.begin, warmup.end) == ('LinearLR', 0, 1500)
    assert (poly.type, poly.begin, poly.end, poly.power) == ('PolyLR', 1500, 160000, 1.0)
    assert cfg.train_cfg.max_iters == 160000
    assert cfg.model.test_cfg == dict(mode='slide', crop_size=(1024, 1024), stride=(768, 768))
    assert cfg.model.data_preprocessor.size == (1024, 1024)
    assert cfg.model.backbone.arch == 'b3' and cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.model.backbone.init_cfg == dict(type='Pretrained',
                                               checkpoint='data/pretrained/mit_b3.pth')
    assert cfg.model.decode_head.in_channels == [64, 128, 320, 512]
    assert cfg.model.decode_head.channels == 768
    crop = [t for t in cfg.train_pipeline if t.type == 'RandomCrop'][0]
    assert crop.crop_size == (1024, 1024)


@pytest.mark.parametrize('path', CONFIGS, ids=short_name)
def test_b3_config_builds_with_expected_mixers(path):
    cfg = Config.fromfile(path)
    model = MODELS.build(cfg.model)  # not initialised: no pretrained file needed
    backbone = model.backbone
    assert type(backbone).__name__ == 'MixerMiT'
    assert [len(layers) for _, layers, _ in backbone.layers] == [3, 4, 18, 3]
    expected = expected_mixers(short_name(path))
    configured = cfg.model.backbone.mixers
    configured = list(configured) if isinstance(configured, (list, tuple)) else [configured] * 4
    assert [dict(m) for m in configured] == expected
    for stage, mixer in enumerate(expected):
        assert {type(layer.attn).__name__ for layer in backbone.layers[stage][1]} == {mixer['type']}
    first = backbone.layers[0][1][0].attn
    if short_name(path) == 'afno25':
        assert first.hard_thresholding_fraction == 0.25
    if short_name(path) == 'gfn':
        assert [backbone.layers[s][1][0].attn.base_hw_shape for s in range(4)] == [
            (256, 256), (128, 128), (64, 64), (32, 32)]
    if short_name(path) == 'esa':
        assert [backbone.layers[s][1][0].attn.sr_ratio for s in range(4)] == [8, 4, 2, 1]


@pytest.mark.parametrize('path', CONFIGS, ids=short_name)
def test_b0_sized_train_and_inference(path):
    """Fast: the same config at B0 size, crop 128x256, head width 64."""
    model = build(load_cfg(path, arch='b0', crop=(128, 256), head_channels=64))
    assert torch.isfinite(torch.tensor(train_step(model, 128, 256)))
    whole = predict(model, 128, 256, dict(mode='whole'))
    assert tuple(whole.shape) == (1, 128, 256) and 0 <= whole.min() and whole.max() < 19
    slide = predict(model, 128, 256, dict(mode='slide', crop_size=(128, 128), stride=(96, 96)))
    assert tuple(slide.shape) == (1, 128, 256) and slide.max() < 19
    odd = predict(model, 120, 200, dict(mode='whole'))  # grids 30x50, 15x25, 8x13, 4x7
    assert tuple(odd.shape) == (1, 120, 200)


def train_step_and_predict(model, crop, slide_window, odd, image=None):
    """One training step at ``crop`` (finite loss), then whole-image and sliding-window (stride
    3/4 of the window) inference of ``image`` (default: the crop) and whole-image inference of an
    ``odd`` non-square size, each giving a label map of its input's size."""
    image = image or crop
    assert torch.isfinite(torch.tensor(train_step(model, *crop)))
    model.zero_grad(set_to_none=True)
    whole = predict(model, *image, dict(mode='whole'))
    assert tuple(whole.shape) == (1, *image) and whole.max() < 19
    stride = slide_window * 3 // 4
    slide = predict(model, *image, dict(mode='slide', crop_size=(slide_window, ) * 2,
                                         stride=(stride, stride)))
    assert tuple(slide.shape) == (1, *image)
    assert tuple(predict(model, *odd, dict(mode='whole')).shape) == (1, *odd)


@pytest.mark.slow
@pytest.mark.parametrize('path', CONFIGS, ids=short_name)
def test_b3_train_step_and_inference(path):
    """The full B3 segmentor (768-wide head) of every config at small sizes, where each mixer
    meets B3's widths, heads and depths: one training step at a 64x128 crop, whole-image and
    sliding-window inference, and an odd non-square image (grids 18x26, 9x13, 5x7, 3x4)."""
    train_step_and_predict(build(load_cfg(path, crop=(64, 128))), crop=(64, 128),
                           slide_window=64, odd=(72, 104))


@pytest.mark.slow
def test_b3_train_step_and_inference_at_the_test_sizes():
    """The mixer does not matter here (every mixer's B3 run is above): B3 trained one step at a
    256x512 crop; whole-image inference of a 1024x2048 frame downscaled to 128x256, sliding
    windows (the recipe's 1024/768 scaled by 1/8), and an odd non-square image."""
    model = build(load_cfg(str(ROOT / 'configs' / 'segformer_afno_b3_cityscapes.py'),
                           crop=(256, 512)))
    train_step_and_predict(model, crop=(256, 512), image=(128, 256), slide_window=128,
                           odd=(136, 216))


def test_gpu_check_script_dry_run(tmp_path):
    """tools/analysis/gpu_check_b3.py end to end on the CPU (B0, 64x64, fp32, one config)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'gpu_check_b3', ROOT / 'tools' / 'analysis' / 'gpu_check_b3.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = str(ROOT / 'configs' / 'segformer_gfn_b3_cityscapes.py')
    assert tool.main(['--dry-run', '--out', str(tmp_path), '--configs', config]) == 0
    rows = (tmp_path / 'gpu_check_b3.csv').read_text().splitlines()
    assert rows[0].startswith('config,mixers,params_M') and len(rows) == 2
    assert all(',ok' in row and ',True,' in row for row in rows[1:])
    assert '| segformer_gfn_b3_cityscapes.py | GlobalFilter |' in (
        tmp_path / 'gpu_check_b3.md').read_text()
