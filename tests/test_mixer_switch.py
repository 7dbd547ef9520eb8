"""``--mixer SPEC`` (afno_seg/mixer_switch.py): every SegFormer config in mmseg's wheel x every
listed mixer, the derived config through the work_dir, local pretrained weights, clear refusals,
ADE20K labels of the generated data (the ADE20K run end to end is docs/mixer_switch.md's worked
example, run as written by tests/test_doc_examples.py).

Cost: the config matrix is config-level (no model); models are built and run once per
(MiT size x mixer) at 32 x 32 for B0 and B1, and once per bigger size (one mixer each, rotating
through the catalogue); no training run.
"""
import copy
import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

from afno_seg.engine import UserError, load_config
from afno_seg.engine import run_tool as run_in_process
from afno_seg.mixer_switch import (
    crop_size,
    mit_size,
    parse_mixer_spec,
    resolve_config_path,
    switch_mixer,
)
from afno_seg.mixers import mixer_variants

from conftest import ROOT, load_script

MMSEG_CONFIGS = Path(list(importlib.util.find_spec('mmseg').submodule_search_locations)[0]) / \
    '.mim' / 'configs'
SEGFORMER = sorted(p.name for p in (MMSEG_CONFIGS / 'segformer').glob('segformer_mit-b*.py'))
MIXERS = list(mixer_variants())
ADE_B0 = 'mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
SIZES = ['b0', 'b1', 'b2', 'b3', 'b4', 'b5']
KEPT = ('embed_dims', 'num_layers', 'num_heads', 'num_stages', 'patch_sizes', 'strides',
        'sr_ratios', 'out_indices', 'mlp_ratio', 'qkv_bias', 'drop_rate', 'attn_drop_rate',
        'drop_path_rate', 'in_channels')


@pytest.fixture(scope='module')
def configs() -> dict[str, Config]:
    return {name: Config.fromfile(resolve_config_path(f'mmseg::segformer/{name}'))
            for name in SEGFORMER}


def test_the_wheel_ships_every_size():
    assert {name.split('_')[1] for name in SEGFORMER} == {f'mit-{s}' for s in SIZES}


@pytest.mark.parametrize('name', SEGFORMER)
def test_every_config_x_every_mixer_converts(configs, name):
    """Config level: MixerMiT with the spec's mixers, every size, drop path, outputs and the
    decode head as in mmseg's config, the crop as base grid, afno_seg imported, no URL."""
    original = configs[name]
    source = original.model.backbone
    assert source.type == 'MixVisionTransformer'
    for mixer in MIXERS:
        cfg = switch_mixer(copy.deepcopy(original), mixer, pretrained=False)
        backbone = cfg.model.backbone
        assert backbone.type == 'MixerMiT'
        assert backbone.mixers == [mixer_variants()[mixer]] * 4
        for key in KEPT:
            assert backbone.get(key) == source.get(key), key
        assert cfg.model.decode_head == original.model.decode_head
        assert backbone.base_img_size == crop_size(original)[0] == original.crop_size[0]
        assert 'afno_seg' in cfg.custom_imports.imports
        assert backbone.init_cfg is None and '://' not in str(backbone.to_dict())
    assert mit_size(source) == name.split('_')[1][len('mit-'):]


def forward_cases():
    """Every listed mixer at B0 and B1 (FNO at B1 with 4x4 modes: its dense C x C weight per
    mode makes B1 772 M parameters, 3 GB, at the catalogue's 16x16); one mixer per bigger
    size, rotating."""
    cases = [(size, mixer if (size, mixer) != ('b1', 'fno') else 'fno:modes=(4,4)')
             for size in ('b0', 'b1') for mixer in MIXERS]
    cases += [(size, MIXERS[i % len(MIXERS)]) for i, size in enumerate(SIZES[2:])]
    return cases


@pytest.mark.parametrize('size,mixer', forward_cases())
def test_derived_model_runs_forward(configs, size, mixer):
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    name = next(n for n in SEGFORMER if f'mit-{size}_' in n and 'ade20k-512' in n)
    cfg = switch_mixer(copy.deepcopy(configs[name]), mixer, pretrained=False)
    cfg.model.backbone.base_img_size = 32
    cfg.model.decode_head.norm_cfg = dict(type='BN', requires_grad=True)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model).eval()  # mixers' own initialisation, no MiT init pass
    with torch.no_grad():
        features = model.extract_feat(torch.randn(1, 3, 32, 32))
        logits = model.decode_head(features)
    widths = cfg.model.decode_head.in_channels
    assert [tuple(f.shape) for f in features] == [(1, w, 32 // 4 // 2**i, 32 // 4 // 2**i)
                                                  for i, w in enumerate(widths)]
    assert logits.shape == (1, cfg.model.decode_head.num_classes, 8, 8)
    assert torch.isfinite(logits).all()


def test_spec_grammar_and_refusals():
    variants = mixer_variants()
    hybrid = parse_mixer_spec('afno+afno+esa+esa')
    assert [m['type'] for m in hybrid] == [variants['afno']['type']] * 2 + \
        [variants['esa']['type']] * 2
    assert all(m['sparsity_threshold'] == 0.1 for m in
               parse_mixer_spec('afno:sparsity_threshold=0.1'))
    with pytest.raises(UserError, match=r"--mixer nope: unknown mixer 'nope'.*afno"):
        parse_mixer_spec('nope')
    with pytest.raises(UserError, match='one mixer or 4'):
        parse_mixer_spec('afno+esa')


def one_line_error(capsys, tool: str, *argv: str) -> str:
    """Run a tool's main in this process as its ``__main__`` does: exit 1, one stderr line."""
    main = load_script(tool).main
    assert run_in_process(lambda: main(list(argv))) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith('error: '), err
    return err


def test_tools_refuse_in_one_line(capsys):
    pspnet = 'mmseg::pspnet/pspnet_r50-d8_4xb2-40k_cityscapes-512x1024.py'
    err = one_line_error(capsys, 'tools/train.py', pspnet, '--mixer', 'afno')
    assert "'ResNetV1c'" in err and 'MixVisionTransformer and MixerMiT' in err
    err = one_line_error(capsys, 'tools/analysis/get_flops.py', ADE_B0, '--mixer', 'afnoo')
    assert "unknown mixer 'afnoo'" in err and 'gfn' in err
    err = one_line_error(capsys, 'tools/train.py', 'mmseg::segformer/nope.py', '--mixer', 'afno')
    assert 'no such config in the installed mmseg' in err


def test_derived_config_round_trips(tmp_path):
    cfg = load_config(ADE_B0, mixer='afno+afno+esa+esa:sparsity_threshold=0.05', pretrained=False)
    cfg.dump(str(tmp_path / 'derived.py'))
    again = Config.fromfile(str(tmp_path / 'derived.py'))  # custom_imports: afno_seg
    assert again.model.to_dict() == cfg.model.to_dict()
    assert again.model.backbone.mixers[0]['sparsity_threshold'] == 0.05


@pytest.fixture
def logged(monkeypatch) -> list:
    from afno_seg import mixer_switch
    lines = []
    monkeypatch.setattr(mixer_switch, 'print_log', lambda msg, **kw: lines.append(msg))
    return lines


def test_pretrained_weights_present(tmp_path, logged):
    """A fake MiT-B0 file (mmseg's MixVisionTransformer names) is found by size and loaded;
    the AFNO weights MiT lacks keep their fresh initialisation."""
    from mmseg.models.backbones import MixVisionTransformer
    from mmseg.registry import MODELS
    torch.manual_seed(1)
    mit = MixVisionTransformer(embed_dims=32, num_layers=[2, 2, 2, 2], num_heads=[1, 2, 5, 8])
    torch.save(mit.state_dict(), tmp_path / 'mit_b0.pth')
    cfg = Config.fromfile(resolve_config_path(ADE_B0))
    switch_mixer(cfg, 'afno', pretrained_dir=str(tmp_path))
    assert cfg.model.backbone.init_cfg == dict(type='Pretrained',
                                               checkpoint=str(tmp_path / 'mit_b0.pth'))
    assert len(logged) == 1 and 'mit_b0.pth' in logged[0]
    backbone = MODELS.build(cfg.model.backbone)
    backbone.init_weights()
    own, loaded = backbone.state_dict(), mit.state_dict()
    assert torch.equal(own['layers.0.0.projection.weight'], loaded['layers.0.0.projection.weight'])
    assert torch.equal(own['layers.3.1.1.ffn.layers.4.weight'],
                       loaded['layers.3.1.1.ffn.layers.4.weight'])
    assert not any(key.startswith('layers.0.1.0.attn.') for key in loaded
                   if key in own)  # AFNO's tensors are its own
    assert any(key.startswith('layers.0.1.0.attn.') for key in own)


def test_pretrained_weights_absent(tmp_path, logged):
    """--mixer names the file where it should be; the training preflight refuses it missing, in
    one line saying where to get it, unless --from-scratch, which drops it (one line)."""
    from afno_seg.engine.preflight import check_pretrained
    cfg = Config.fromfile(resolve_config_path(ADE_B0))
    assert '://' in cfg.model.backbone.init_cfg.checkpoint  # mmseg's URL, never fetched
    switch_mixer(cfg, 'gfn', pretrained_dir=str(tmp_path))
    expected = str(tmp_path / 'mit_b0.pth')
    assert cfg.model.backbone.init_cfg == dict(type='Pretrained', checkpoint=expected)
    assert logged == []  # the preflight speaks
    with pytest.raises(UserError) as error:
        check_pretrained(cfg)
    message = str(error.value)
    assert f"model.backbone.init_cfg.checkpoint='{expected}'" in message
    assert 'hf download nvidia/mit-b3' in message and '--from-scratch' in message
    assert '\n' not in message
    folder = tmp_path / 'mit-b0'  # a transformers download: the MiT loader reads the folder
    folder.mkdir()
    cfg.model.backbone.init_cfg.checkpoint = str(folder)
    check_pretrained(cfg)
    cfg.model.backbone.init_cfg.checkpoint = expected
    # a whole model as load_from (a transplant): the MiT file it would replace is not asked for
    whole = copy.deepcopy(cfg)
    whole.load_from = str(tmp_path / 'segformer.pth')  # not read here: the Runner reads it
    check_pretrained(whole)
    assert whole.model.backbone.init_cfg is None
    check_pretrained(cfg, from_scratch=True)
    assert cfg.model.backbone.init_cfg is None
    check_pretrained(cfg)  # nothing left to refuse


@pytest.mark.parametrize('route', ['config', '--mixer'])
def test_train_refuses_a_missing_pretrained_file_before_building(route, tmp_path, monkeypatch,
                                                                 capsys):
    """The project's B3 config and an mmseg config with --mixer: one rule, one line, no Runner
    (it would have made a log folder in the work_dir)."""
    monkeypatch.chdir(tmp_path)  # no data/pretrained here
    argv = ([str(ROOT / 'configs' / 'segformer_afno_b3_cityscapes.py')] if route == 'config'
            else [ADE_B0, '--mixer', 'afno'])
    work_dir = tmp_path / 'work'
    err = one_line_error(capsys, 'tools/train.py', *argv, '--work-dir', str(work_dir))
    size = 'b3' if route == 'config' else 'b0'
    assert f"='data/pretrained/mit_{size}.pth' does not exist" in err
    assert 'hf download nvidia/mit-b3' in err and '--from-scratch' in err
    assert not list(work_dir.glob('*/*.log'))


def test_from_scratch_builds_the_project_config_without_its_pretrained_file(tmp_path,
                                                                            monkeypatch):
    """--from-scratch on a project config: the Pretrained init_cfg is dropped and the model
    initialises (the --mixer route trains end to end in test_ade20k_end_to_end)."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from afno_seg.backbones.mixer_mit import ARCH_SETTINGS
    from afno_seg.engine.preflight import check_pretrained
    monkeypatch.chdir(tmp_path)
    cfg = Config.fromfile(str(ROOT / 'configs' / 'segformer_afno_b3_cityscapes.py'))
    cfg.model.backbone.arch = 'b0'  # the rule does not depend on the size; B0 is quicker
    sizes = ARCH_SETTINGS['b0']
    cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
    check_pretrained(cfg, from_scratch=True)
    assert cfg.model.backbone.init_cfg is None
    init_default_scope('mmseg')
    MODELS.build(cfg.model).init_weights()


def test_depth_scaled_cost_equals_a_full_trace():
    """The scaling table's 1- and 2-layer traces extrapolated to B2's [3, 4, 6, 3] layers give
    the full trace's every row and total."""
    from afno_seg.analysis.config_cost import analyze_config, depth_scaled_cost
    config = 'mmseg::segformer/segformer_mit-b2_8xb2-160k_ade20k-512x512.py'
    full = analyze_config(config, (64, 64), mixer='gfn')
    scaled = depth_scaled_cost(config, 'gfn', (64, 64))
    assert scaled['total'] == pytest.approx(full['total'])
    assert [(r['group'], r['component']) for r in scaled['rows']] == \
        [(r['group'], r['component']) for r in full['rows']]
    for key in ('flops', 'params'):  # FLOPs are sums of exact integer counts
        assert [r[key] for r in scaled['rows']] == pytest.approx([r[key] for r in full['rows']])
    assert scaled['stages']['stage 3']['layers'] == full['stages']['stage 3']['layers'] == 6


def test_ade20k_layout_labels(tmp_path):
    """Generated ADE20K-layout labels are ADE20K's (1-based, 0 = other). The layout end to end
    (mmseg's ADE20K B0 config with AFNO, --from-scratch, training, the derived config in the
    work_dir, evaluation and inference with it) is docs/mixer_switch.md's worked example, which
    tests/test_doc_examples.py runs as written."""
    from afno_seg.datasets.demo_dataset import CLASSES, ade20k_label_table, generate
    data = tmp_path / 'ade'
    generate(data, num_train=1, num_val=2, height=64, width=128, verbose=False, layout='ade20k')
    labels = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
              for p in sorted((data / 'annotations' / 'validation').glob('ADE_val_*.png'))]
    assert len(labels) == 2 and set(np.unique(labels)) <= set(ade20k_label_table().tolist())
    assert ade20k_label_table()[CLASSES.index('car')] == 21  # ADE20K's "car", 1-based
