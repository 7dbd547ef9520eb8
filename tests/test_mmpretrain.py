"""The MMPretrain path: MixerViT, the ImageNet configs, the tiny ImageNet, and pretrain -> segment.

- MixerViT alone: shapes on square, non-square and odd sizes for every mixer, gradients, shift
  equivariance (GFN, no position embedding), position-embedding resizing, strict loading.
- Every config under configs/mmpretrain/: builds from mmpretrain's registry, passes the tools'
  preflight, carries the DeiT recipe its name promises, and (B3) has exactly the tensors of the
  matching segmentation backbone; AFNO-ViT-S/16 has the paper's size, also from a clone in a
  folder named afno_seg, beside which a script still imports the package.
- End to end: tools/train.py trains the tiny config on the generated set above chance,
  tools/test.py reports it, and the checkpoint initialises tests/configs/tiny_demo.py's segmentor
  with every backbone tensor and the same features. Slow: 2-process gloo, the real configs.
"""
import copy
import glob
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.models.utils import resize_pos_embed

import afno_seg
from afno_seg.backbones.mixer_vit import MixerViT
from afno_seg.engine import UserError, check_data_roots, check_model_types
from afno_seg.mixers import stores_grid
from afno_seg.registry import MMPRETRAIN_MODELS, MMSEG_MODELS

from conftest import ROOT, TINY_CONFIG, check, load_script, metrics_of, run_tool
from mixer_examples import example_configs

CONFIG_DIR = ROOT / 'configs' / 'mmpretrain'
IMAGENET_CONFIGS = sorted(glob.glob(str(CONFIG_DIR / '*.py')))
TINY_CLS_CONFIG = str(CONFIG_DIR / 'tiny' / 'mit-demo_afno_1xb16-4e_tiny-imagenet.py')
# Shrink the tiny classifier to the backbone of tests/configs/tiny_demo.py (as that file shrinks
# configs/demo/segformer_afno_demo.py), so the hand-off test can use that segmentor.
SHRINK_OPTIONS = {'model.backbone.embed_dims': 16, 'model.head.in_channels': 128,
                  'model.backbone.drop_path_rate': 0.0}
SHRINK = [f'{key}={value}' for key, value in SHRINK_OPTIONS.items()]
# Every mixer of the catalogue as its example case configures it, plus the names used below.
EVERY_MIXER = example_configs()
MIXERS = {
    'afno': dict(type='AFNOMixer', num_blocks=4),
    'gfn': dict(type='GlobalFilterMixer'),
    'fnet': dict(type='FNetMixer'),
    'sa': dict(type='FullSelfAttentionMixer'),
}


def tiny_vit(mixer, **kwargs) -> MixerViT:
    args = dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2), mixers=mixer, img_size=32,
                patch_size=8)
    model = MixerViT(**{**args, **kwargs})
    model.init_weights()
    return model


# ------------------------------------------------------------------------------------ MixerViT
@pytest.mark.parametrize('name', list(EVERY_MIXER))
def test_mixer_vit_shapes_and_gradients(name):
    torch.manual_seed(0)
    model = tiny_vit(EVERY_MIXER[name], out_indices=(0, -1))
    for height, width in [(32, 32), (40, 24), (37, 29)]:  # base, non-square, not patch multiples
        outs = model(torch.randn(2, 3, height, width))
        grid = (math.ceil(height / 8), math.ceil(width / 8))
        assert [tuple(o.shape) for o in outs] == [(2, 16, *grid)] * 2
    outs[-1].square().mean().backward()
    for key, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), key
        assert param.grad.abs().sum() > 0, key


def test_mixer_vit_fills_grid_and_heads_into_mixers():
    gfn = tiny_vit(MIXERS['gfn'], img_size=(48, 40))
    assert gfn.layers[0].attn.base_hw_shape == (6, 5)
    attention = tiny_vit(MIXERS['sa'])
    assert attention.layers[0].attn.num_heads == 2


def test_final_norm_only_on_last_output():
    torch.manual_seed(0)
    first, last = tiny_vit(MIXERS['afno'], out_indices=(0, 1))(torch.randn(1, 3, 32, 32))
    # At initialisation the final LayerNorm has weight 1, bias 0: each token is standardised.
    assert last.mean(dim=1).abs().max() < 1e-5
    assert torch.allclose(last.var(dim=1, unbiased=False), torch.ones(1), atol=1e-3)
    assert first.mean(dim=1).abs().max() > 1e-3


def test_global_filter_vit_is_equivariant_to_patch_shifts():
    """No position embedding + circular global filters + point-wise MLPs/norms: rolling the image
    by whole patches rolls the output map by as many tokens (checks token order, hw_shape)."""
    torch.manual_seed(0)
    model = tiny_vit(MIXERS['gfn'], with_pos_embed=False).eval()
    image = torch.randn(1, 3, 40, 56)
    shifted = torch.roll(image, shifts=(8, 16), dims=(2, 3))
    with torch.no_grad():
        out, out_shifted = model(image)[0], model(shifted)[0]
    torch.testing.assert_close(out_shifted, torch.roll(out, shifts=(1, 2), dims=(2, 3)),
                               rtol=1e-4, atol=1e-5)
    with_pos = tiny_vit(MIXERS['gfn']).eval()
    with torch.no_grad():
        assert not torch.allclose(with_pos(shifted)[0],
                                  torch.roll(with_pos(image)[0], (1, 2), (2, 3)), atol=1e-3)


def test_pretrained_loads_strictly_and_resizes_position_embedding(tmp_path):
    torch.manual_seed(0)
    source = tiny_vit(MIXERS['afno'])
    path = str(tmp_path / 'classifier.pth')
    state = {f'backbone.{k}': v for k, v in source.state_dict().items()}
    torch.save({'state_dict': {**state, 'head.fc.weight': torch.zeros(4, 16)}}, path)
    init_cfg = dict(type='Pretrained', checkpoint=path, prefix='backbone.')
    target = tiny_vit(MIXERS['afno'], img_size=48, init_cfg=init_cfg)  # 6x6 grid instead of 4x4
    for key, value in source.state_dict().items():
        if key != 'pos_embed':
            torch.testing.assert_close(target.state_dict()[key], value, rtol=0, atol=0)
    expected = resize_pos_embed(source.pos_embed.detach(), (4, 4), (6, 6), num_extra_tokens=0)
    torch.testing.assert_close(target.pos_embed.detach(), expected)

    torch.save({'state_dict': {**state, 'backbone.extra.weight': torch.zeros(1)}}, path)
    with pytest.raises(RuntimeError, match='extra.weight'):
        tiny_vit(MIXERS['afno'], init_cfg=init_cfg)
    del state['backbone.norm.bias']
    torch.save({'state_dict': state}, path)
    with pytest.raises(RuntimeError, match='norm.bias'):
        tiny_vit(MIXERS['afno'], init_cfg=init_cfg)


@pytest.mark.parametrize('kwargs, match', [
    (dict(arch='xl'), 'unknown arch'),
    (dict(arch=dict(embed_dims=16, num_layers=2)), 'num_heads'),
    (dict(out_indices=(2, )), 'out_indices'),
    (dict(out_indices=()), 'out_indices'),
    (dict(init_cfg=dict(type='Kaiming')), 'Pretrained'),
])
def test_mixer_vit_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_vit(MIXERS['fnet'], **kwargs)


# ------------------------------------------------------------------------------------- configs
def build_classifier(cfg):
    """What the Runner builds: the model with the config's top-level data_preprocessor."""
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(model_cfg)


def segmentation_config_for(path: str) -> str:
    mixer = re.match(r'mit-b3_(.+?)_\d+xb\d+', os.path.basename(path)).group(1)
    return str(ROOT / 'configs' / f'segformer_{mixer}_b3_cityscapes.py')


@pytest.mark.parametrize('path', IMAGENET_CONFIGS, ids=os.path.basename)
def test_imagenet_config_follows_the_recipe(path):
    cfg = Config.fromfile(path)
    assert cfg.default_scope == 'mmpretrain'
    assert 'afno_seg' in cfg.custom_imports['imports']
    check_model_types(cfg)  # what tools/train.py checks, in mmpretrain's registry

    # The facts the name carries, and DeiT's recipe: lr 5e-4 x total batch / 512, wd 0.05,
    # 5 warm-up epochs then cosine to the end, Mixup 0.8 / CutMix 1.0, label smoothing 0.1.
    gpus, batch, epochs = map(int, re.search(r'_(\d+)xb(\d+)-(\d+)e_in1k', path).groups())
    assert cfg.train_dataloader.batch_size == batch
    assert cfg.train_dataloader.dataset.type == 'ImageNet'
    optimizer = cfg.optim_wrapper.optimizer
    assert optimizer.type == 'AdamW'
    assert optimizer.lr == pytest.approx(5e-4 * gpus * batch / 512)
    assert optimizer.weight_decay == 0.05
    assert cfg.auto_scale_lr.base_batch_size == gpus * batch
    assert cfg.train_cfg.max_epochs == epochs == 300
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end, cosine.type, cosine.begin, cosine.end) == \
        ('LinearLR', 5, 'CosineAnnealingLR', 5, epochs)
    assert [(a.type, a.alpha) for a in cfg.model.train_cfg.augments] == \
        [('Mixup', 0.8), ('CutMix', 1.0)]
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert cfg.model.backbone.drop_path_rate == 0.1
    if cfg.model.backbone.type == 'MixerMiT':
        # The segmentation counterpart builds the same backbone: every argument agrees except
        # the outputs (all four stages there) and the weights to start from.
        seg_backbone = Config.fromfile(segmentation_config_for(path)).model.backbone
        differ = {k for k in set(seg_backbone) | set(cfg.model.backbone)
                  if seg_backbone.get(k) != cfg.model.backbone.get(k)}
        expected = {'out_indices', 'init_cfg', 'base_img_size'}
        assert differ == expected, differ
        assert cfg.model.backbone.out_indices == (3, )


@pytest.mark.slow
@pytest.mark.parametrize('path', [p for p in IMAGENET_CONFIGS if 'mit-b3' in os.path.basename(p)],
                         ids=os.path.basename)
def test_b3_classifier_has_the_segmentation_backbone_tensors(path):
    """The hand-off loads everything: the B3 classifier's backbone has exactly the tensors of its
    segmentation counterpart (a mixer storing a grid, GFN or DFF, after base_img_size=224 there,
    as docs/pretrain.md says)."""
    classifier = build_classifier(Config.fromfile(path))
    backbone = classifier.backbone.state_dict()
    with torch.no_grad():
        feature, = classifier.backbone(torch.zeros(1, 3, 64, 64))
    assert classifier.head.fc.in_features == feature.shape[1]
    seg_backbone_cfg = dict(Config.fromfile(segmentation_config_for(path)).model.backbone,
                            init_cfg=None)
    mixers = seg_backbone_cfg['mixers']
    if any(stores_grid(MMSEG_MODELS.get(mixer['type']))
           for mixer in (mixers if isinstance(mixers, list) else [mixers])):
        seg_backbone_cfg['base_img_size'] = 224
    segmentation = MMSEG_MODELS.build(seg_backbone_cfg).state_dict()
    assert list(backbone) == list(segmentation)
    assert all(backbone[k].shape == segmentation[k].shape for k in backbone)


def afno_vit_s16_parameters(classes=1000, width=384, layers=12, blocks=8, grid=14, patch=16):
    """Parameters of AFNO-ViT-S/16 counted from its definition (module docstring)."""
    per_layer = 2 * 2 * width  # two LayerNorms
    per_layer += 2 * width * 4 * width + 4 * width + width  # MLP
    per_layer += 2 * (2 * width * width // blocks) + 2 * (2 * width)  # AFNO w1, w2, b1, b2
    stem = 3 * patch * patch * width + width + grid * grid * width
    return stem + layers * per_layer + 2 * width + classes * width + classes


@pytest.mark.parametrize('path', [p for p in IMAGENET_CONFIGS if 'vit-s16' in os.path.basename(p)],
                         ids=os.path.basename)
def test_vit_config_builds_and_classifies(path):
    classifier = build_classifier(Config.fromfile(path))
    feature, = classifier.backbone(torch.zeros(1, 3, 224, 224))
    assert tuple(feature.shape) == (1, 384, 14, 14)
    with torch.no_grad():
        logits = classifier(torch.zeros(2, 3, 64, 48), mode='tensor')  # other sizes work too
    assert tuple(logits.shape) == (2, 1000)
    if 'afno' in os.path.basename(path):  # the file's name: a clone's folder may say afno too
        count = sum(p.numel() for p in classifier.parameters())
        assert count == afno_vit_s16_parameters()
        assert 15.5e6 < count < 16.5e6  # "about 16M" (AFNO paper, Table 5)


def test_the_vit_check_holds_in_a_clone_folder_named_afno_seg(tmp_path):
    """The configs of a clone in a folder named ``afno_seg``: FNet's is not taken for AFNO's (the
    parameter count above is AFNO's)."""
    shutil.copytree(ROOT / 'configs', tmp_path / 'afno_seg' / 'configs')
    fnet, = glob.glob(str(tmp_path / 'afno_seg' / 'configs' / 'mmpretrain' / 'vit-s16_fnet_*.py'))
    test_vit_config_builds_and_classifies(fnet)


def test_a_folder_named_afno_seg_beside_a_script_does_not_hide_the_package(tmp_path):
    """A script saved beside a clone whose folder is named ``afno_seg``: ``import afno_seg`` (a
    config's ``custom_imports`` too) finds the package, not that folder as an empty namespace
    package with nothing registered (pyproject.toml, ``package-dir``; a venv installed before
    that change needs ``make install`` again)."""
    (tmp_path / 'afno_seg' / 'configs').mkdir(parents=True)
    (tmp_path / 'script.py').write_text(
        "import importlib.util\nprint(importlib.util.find_spec('afno_seg').origin)\n")
    result = subprocess.run([sys.executable, 'script.py'], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.strip() == str(Path(afno_seg.__file__)), result.stdout + result.stderr


def test_missing_imagenet_is_reported():
    cfg = Config.fromfile(str(CONFIG_DIR / 'vit-s16_afno_8xb128-300e_in1k.py'))
    cfg.train_dataloader.dataset.data_root = '/nonexistent/imagenet'
    with pytest.raises(UserError, match='train_dataloader.dataset.data_root'):
        check_data_roots(cfg, ['train_dataloader'])


def test_custom_imports_alone_register_the_backbones():
    """A fresh interpreter that imports nothing of afno_seg builds both classifiers."""
    configs = [TINY_CLS_CONFIG, str(CONFIG_DIR / 'vit-s16_fnet_8xb128-300e_in1k.py')]
    script = (
        'import sys\nfrom mmengine.config import Config\n'
        'from mmpretrain.registry import MODELS\n'
        "assert 'afno_seg' not in sys.modules\n"
        f'for path in {configs!r}:\n'
        '    cfg = Config.fromfile(path)\n'
        '    model = MODELS.build(cfg.model)\n'
        "    print('BUILT', type(model).__name__, type(model.backbone).__name__)\n")
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            cwd=ROOT, timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert result.returncode == 0, result.stderr[-3000:]
    built = [line for line in result.stdout.split('\n') if line.startswith('BUILT')]
    assert built == ['BUILT ImageClassifier MixerMiT', 'BUILT ImageClassifier MixerViT']


# ---------------------------------------------------------------------------------- tiny data
@pytest.fixture(scope='module')
def tiny_imagenet(tmp_path_factory):
    out = tmp_path_factory.mktemp('tiny') / 'tiny_imagenet'
    load_script('tools/dataset/make_tiny_imagenet.py').generate(str(out))
    return out


def test_tiny_imagenet_layout_and_determinism(tiny_imagenet, tmp_path):
    generator = load_script('tools/dataset/make_tiny_imagenet.py')
    for split, per_class in (('train', 40), ('val', 10)):
        for name in generator.CLASSES:
            assert len(glob.glob(str(tiny_imagenet / split / name / '*.JPEG'))) == per_class
        lines = (tiny_imagenet / 'meta' / f'{split}.txt').read_text().split('\n')[:-1]
        assert len(lines) == per_class * len(generator.CLASSES)
        for line in lines:
            rel, label = line.split()
            assert rel.split('/')[0] == generator.CLASSES[int(label)]
    again = tmp_path / 'again'
    generator.generate(str(again), num_train=40, num_val=2)
    for path in glob.glob(str(again / 'val' / '*' / '*.JPEG')):
        relative = os.path.relpath(path, again)
        assert open(path, 'rb').read() == open(tiny_imagenet / relative, 'rb').read()


def test_tiny_imagenet_colour_carries_no_label(tiny_imagenet):
    """Nearest class-mean colour (fit on train, scored on val) is near chance: shape is needed."""
    generator = load_script('tools/dataset/make_tiny_imagenet.py')

    def mean_colours(split):
        return np.stack([[cv2.imread(p).reshape(-1, 3).mean(0) for p in
                          sorted(glob.glob(str(tiny_imagenet / split / name / '*.JPEG')))]
                         for name in generator.CLASSES])  # (classes, images, 3)

    centroids = mean_colours('train').mean(1)
    val = mean_colours('val')
    predicted = np.linalg.norm(val[:, :, None] - centroids[None, None], axis=-1).argmin(-1)
    accuracy = (predicted == np.arange(len(generator.CLASSES))[:, None]).mean()
    assert accuracy < 0.5


# ----------------------------------------------------------------------------- end to end
def data_options(root):
    return [f'{loader}.dataset.data_root={root}/'
            for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')]


@pytest.fixture(scope='module')
def classifier_checkpoint(tiny_imagenet, tmp_path_factory):
    """tools/train.py: the tiny config, 4 epochs of 10 iterations; returns the last checkpoint."""
    work_dir = tmp_path_factory.mktemp('cls')
    check(run_tool('tools/train.py', TINY_CLS_CONFIG, '--work-dir', str(work_dir),
                   '--cfg-options', *SHRINK, *data_options(tiny_imagenet)))
    return str(work_dir / 'epoch_4.pth')


def test_tiny_classifier_beats_chance_via_test_tool(classifier_checkpoint, tiny_imagenet,
                                                     tmp_path):
    check(run_tool('tools/test.py', TINY_CLS_CONFIG, classifier_checkpoint, '--work-dir',
                   str(tmp_path), '--cfg-options', *SHRINK, *data_options(tiny_imagenet)))
    top1 = metrics_of(str(tmp_path))['accuracy/top1']
    assert top1 >= 60.0  # 4 balanced classes: chance is 25%


def test_classifier_checkpoint_initialises_segmentor(classifier_checkpoint, tiny_imagenet):
    checkpoint = torch.load(classifier_checkpoint, map_location='cpu', weights_only=False)
    trained = {k[len('backbone.'):]: v for k, v in checkpoint['state_dict'].items()
               if k.startswith('backbone.')}
    seg_cfg = Config.fromfile(TINY_CONFIG)
    with DefaultScope.overwrite_default_scope('mmseg'):  # as the Runner of an mmseg config
        fresh = MMSEG_MODELS.build(copy.deepcopy(seg_cfg.model))
        fresh.init_weights()
        seg_cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=classifier_checkpoint,
                                               prefix='backbone.')
        segmentor = MMSEG_MODELS.build(seg_cfg.model)
        segmentor.init_weights()

    # Every backbone tensor loaded: the same names (none missing, none unexpected), same values.
    loaded = segmentor.backbone.state_dict()
    assert sorted(loaded) == sorted(trained)
    for key, value in trained.items():
        assert torch.equal(loaded[key], value), key
    assert any(not torch.equal(fresh.backbone.state_dict()[k], v) for k, v in trained.items())

    # Same image through each model's own data preprocessor and backbone: same features.
    cls_cfg = Config.fromfile(TINY_CLS_CONFIG)
    cls_cfg.merge_from_dict(SHRINK_OPTIONS)
    classifier = build_classifier(cls_cfg)
    classifier.load_state_dict(checkpoint['state_dict'])
    path = sorted(glob.glob(str(tiny_imagenet / 'val' / 'disk' / '*.JPEG')))[0]
    image = torch.from_numpy(cv2.imread(path)).permute(2, 0, 1).contiguous()  # BGR, as loaded
    classifier.eval(), segmentor.eval(), fresh.eval()
    with torch.no_grad():
        cls_inputs = classifier.data_preprocessor(dict(inputs=[image]))['inputs']
        seg_inputs = segmentor.data_preprocessor(dict(inputs=[image]))['inputs']
        torch.testing.assert_close(cls_inputs, seg_inputs)
        cls_feature, = classifier.extract_feat(cls_inputs, stage='backbone')
        seg_features = segmentor.extract_feat(seg_inputs)
        torch.testing.assert_close(seg_features[-1], cls_feature, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(fresh.extract_feat(seg_inputs)[-1], cls_feature, atol=1e-3)


@pytest.mark.slow
def test_two_process_gloo_training(tiny_imagenet, tmp_path):
    result = check(run_tool('tools/dist_train.sh', TINY_CLS_CONFIG, '2', '--work-dir',
                            str(tmp_path), '--cfg-options', *SHRINK, *data_options(tiny_imagenet),
                            'train_cfg.max_epochs=2', 'train_cfg.val_interval=2',
                            env={'PORT': '29631'}))
    log = result.stdout + result.stderr
    assert 'gloo' in log
    assert 'Epoch(train) [2][5/5]' in log  # 160 images / (2 processes x 16)
    assert 'accuracy/top1' in log
    assert os.path.isfile(tmp_path / 'epoch_2.pth')


@pytest.mark.slow
def test_imagenet_config_runs_through_the_tools(tiny_imagenet, tmp_path):
    """The full recipe (RandAugment, Mixup/CutMix, AMP -> CPU autocast, ImageNet meta/ files) for
    two iterations on 8 tiny images, then its validation (the recipe's test pipeline) on 4. The
    recipe is the same base for the MiT and ViT configs: one of them runs (the MiT classifier
    trains through the tools above, tools/test.py on a classifier is the tiny config's test)."""
    config = str(CONFIG_DIR / 'vit-s16_afno_8xb128-300e_in1k.py')
    options = [*data_options(tiny_imagenet), 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1']
    for loader, size in (('train_dataloader', 8), ('val_dataloader', 4), ('test_dataloader', 4)):
        options += [f'{loader}.batch_size=4', f'{loader}.num_workers=0',
                    f'{loader}.dataset.indices={size}']
    result = check(run_tool('tools/train.py', config, '--work-dir', str(tmp_path / 'train'),
                            '--cfg-options', *options))
    log = result.stdout + result.stderr
    assert '[afno_seg] precision ' in log  # AMP on a CPU: fp32 under auto
    assert 'Epoch(train) [1][2/2]' in log and 'Epoch(val) [1][1/1]' in log
    assert re.search(r'accuracy/top1: \d+\.\d+', log), log[-3000:]
    assert os.path.isfile(tmp_path / 'train' / 'epoch_1.pth')
