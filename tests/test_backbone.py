"""MixerMiT: shapes for every mixer, per-stage mixer configs, argument checks, equivalence with
mmseg's MixVisionTransformer, and pretrained MiT checkpoints in both key layouts."""
import copy
import logging
import re
import sys
import uuid
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from mmengine.logging import MMLogger
from mmseg.models.backbones import MixVisionTransformer

import afno_seg.backbones  # noqa: F401  (registers MixerMiT)
import afno_seg.mixers  # noqa: F401  (registers the mixers)
from afno_seg.backbones import MixerMiT, official_to_mmseg
from afno_seg.backbones.stage import stage_grids

from mixer_examples import example_configs

ROOT = Path(__file__).resolve().parents[1]
# Tiny MiT: widths 16, 32, 64, 128 (heads 1, 2, 4, 8), one layer per stage.
TINY = dict(embed_dims=16, num_layers=[1, 1, 1, 1], num_heads=[1, 2, 4, 8])
# Every mixer of the catalogue, as its example case configures it (stage arguments filled in).
EVERY_MIXER = example_configs()
# The mixers that the tests below single out.
MIXERS = {
    'esa': dict(type='EfficientSelfAttentionMixer'),
    'sa': dict(type='FullSelfAttentionMixer'),
    'afno': dict(type='AFNOMixer', num_blocks=4),
    'gfn': dict(type='GlobalFilterMixer'),
}


def tiny(**kwargs) -> MixerMiT:
    return MixerMiT(**{**TINY, **kwargs})


def stage_mixers(model: MixerMiT, stage: int) -> list:
    return [layer.attn for layer in model.layers[stage][1]]


def test_stage_grids_match_the_patch_embeddings():
    model = tiny().eval()
    x = torch.randn(1, 3, 61, 90)
    assert [tuple(o.shape[2:]) for o in model(x)] == stage_grids((61, 90)) == \
        [(16, 23), (8, 12), (4, 6), (2, 3)]


@pytest.mark.parametrize('name', list(EVERY_MIXER))
@pytest.mark.parametrize('hw', [(64, 64), (56, 88)])  # square; non-square with odd grids
def test_stage_shapes_every_mixer(name, hw):
    torch.manual_seed(0)
    model = tiny(mixers=EVERY_MIXER[name]).eval()
    x = torch.randn(2, 3, *hw)
    outs = model(x)
    assert len(outs) == 4
    for stage, (out, grid) in enumerate(zip(outs, stage_grids(hw))):
        assert tuple(out.shape) == (2, 16 * TINY['num_heads'][stage], *grid)
        assert torch.isfinite(out).all()
    # Every mixer really is the configured type in every stage.
    mixer_type = EVERY_MIXER[name]['type']
    assert all(type(m).__name__ == mixer_type for s in range(4) for m in stage_mixers(model, s))


def test_out_indices_subset():
    model = tiny(out_indices=(1, 3)).eval()
    outs = model(torch.randn(1, 3, 64, 96))
    assert [tuple(o.shape) for o in outs] == [(1, 32, 8, 12), (1, 128, 2, 3)]


def test_default_is_segformer_and_mmseg_identical():
    """Default mixers = efficient self-attention: same keys and same outputs as mmseg's MiT."""
    torch.manual_seed(0)
    reference = MixVisionTransformer(**TINY).eval()
    model = tiny().eval()
    assert list(model.state_dict()) == list(reference.state_dict())
    model.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 56, 88)
    with torch.no_grad():
        for ours, theirs in zip(model(x), reference(x)):
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_stage_arguments_are_filled_only_where_accepted():
    model = tiny(mixers=dict(type='EfficientSelfAttentionMixer'), sr_ratios=[8, 4, 2, 1])
    assert [stage_mixers(model, s)[0].num_heads for s in range(4)] == [1, 2, 4, 8]
    assert [stage_mixers(model, s)[0].sr_ratio for s in range(4)] == [8, 4, 2, 1]
    # FullSelfAttentionMixer has no sr_ratio parameter: it is not passed and stays 1.
    model = tiny(mixers=dict(type='FullSelfAttentionMixer'))
    assert [stage_mixers(model, s)[0].sr_ratio for s in range(4)] == [1, 1, 1, 1]
    # A value set in the mixer config wins over the backbone's.
    model = tiny(mixers=dict(type='AxialAttentionMixer', num_heads=2),
                 num_heads=[1, 2, 4, 8])
    assert [stage_mixers(model, s)[0].num_heads for s in range(4)] == [2, 2, 2, 2]


def test_gfn_base_grid_from_base_img_size():
    model = tiny(mixers=dict(type='GlobalFilterMixer'), base_img_size=1024)
    assert [stage_mixers(model, s)[0].base_hw_shape for s in range(4)] == [
        (256, 256), (128, 128), (64, 64), (32, 32)]
    model = tiny(mixers=dict(type='GlobalFilterMixer'), base_img_size=(512, 1024))
    assert stage_mixers(model, 0)[0].base_hw_shape == (128, 256)
    model = tiny(mixers=dict(type='GlobalFilterMixer', base_hw_shape=(8, 8)), base_img_size=1024)
    assert stage_mixers(model, 3)[0].base_hw_shape == (8, 8)


def test_single_dict_equals_list_of_four():
    torch.manual_seed(0)
    single = tiny(mixers=MIXERS['afno'])
    torch.manual_seed(0)
    listed = tiny(mixers=[copy.deepcopy(MIXERS['afno']) for _ in range(4)])
    assert list(single.state_dict()) == list(listed.state_dict())
    for (key, a), b in zip(single.state_dict().items(), listed.state_dict().values()):
        assert torch.equal(a, b), key
    # The mixers of different layers/stages are distinct modules (no shared weights).
    mixers = [m for s in range(4) for m in stage_mixers(single, s)]
    assert len({id(m) for m in mixers}) == len(mixers)


def test_hybrid_forward_backward():
    torch.manual_seed(0)
    mixers = [MIXERS['afno'], MIXERS['gfn'], MIXERS['esa'], MIXERS['esa']]
    model = tiny(mixers=mixers, num_layers=[2, 1, 2, 1])
    assert [type(stage_mixers(model, s)[0]).__name__ for s in range(4)] == [
        'AFNOMixer', 'GlobalFilterMixer', 'EfficientSelfAttentionMixer',
        'EfficientSelfAttentionMixer']
    outs = model(torch.randn(2, 3, 48, 80))
    sum(o.square().mean() for o in outs).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    assert any(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if '.attn.' in n)


def test_drop_path_is_random_in_training_only():
    torch.manual_seed(0)
    model = tiny(mixers=MIXERS['afno'], drop_path_rate=0.5, num_layers=[2, 2, 2, 2])
    rates = [layer.drop_path.drop_prob for _, layers, _ in model.layers for layer in layers]
    assert rates[0] == 0 and rates[-1] == pytest.approx(0.5)
    assert rates == sorted(rates)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert not torch.equal(model(x)[-1], model(x)[-1])
    model.eval()
    assert torch.equal(model(x)[-1], model(x)[-1])


@pytest.mark.parametrize('name', ['esa', 'afno', 'gfn'])
def test_with_cp_matches_plain(name, monkeypatch):
    import afno_seg.backbones.encoder_layer as encoder_layer
    calls = []
    checkpoint = encoder_layer.cp.checkpoint
    monkeypatch.setattr(encoder_layer.cp, 'checkpoint',
                        lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    torch.manual_seed(0)
    plain = tiny(mixers=MIXERS[name])
    checkpointed = tiny(mixers=MIXERS[name], with_cp=True)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 40, 56)
    grads = []
    for model in (plain, checkpointed):
        model.train()
        loss = sum(o.square().mean() for o in model(x.clone().requires_grad_()))
        loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert len(calls) == 4  # one recomputed layer per stage
    for key in grads[0]:
        torch.testing.assert_close(grads[1][key], grads[0][key], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('kwargs, error, pattern', [
    (dict(mixers=dict(type='NoSuchMixer')), KeyError, r"NoSuchMixer.*AFNOMixer"),
    (dict(mixers=dict(type='ResNet')), KeyError, r"not a TokenMixer: 'ResNet'"),
    (dict(mixers=[MIXERS['afno']] * 3), ValueError, 'list of num_stages=4'),
    (dict(mixers='AFNOMixer'), ValueError, 'one dict or a list'),
    (dict(mixers=[MIXERS['afno']] * 3 + ['AFNOMixer']), TypeError, 'must be a dict'),
    (dict(mixers=dict(num_blocks=4)), TypeError, 'must be a dict with a "type"'),
    (dict(mixers=dict(type='AFNOMixer', embed_dims=24)), ValueError, 'leave embed_dims unset'),
    (dict(arch='b9'), ValueError, 'unknown arch'),
    (dict(arch='b3', embed_dims=32), ValueError, "arch='b3' sets embed_dims=64"),
    (dict(arch='b0', num_layers=[1, 1, 1, 1]), ValueError, 'num_layers'),
    (dict(num_layers=[1, 1, 1]), ValueError, 'num_layers has 3 entries'),
    (dict(sr_ratios=[8, 4, 2]), ValueError, 'sr_ratios has 3 entries'),
    (dict(out_indices=(0, 4)), ValueError, 'out_indices'),
    (dict(pretrained='a.pth', init_cfg=dict(type='Pretrained', checkpoint='a.pth')), ValueError,
     'not both'),
    (dict(pretrained=3), TypeError, 'pretrained must be a path'),
    (dict(mixers=dict(type='AFNOMixer', num_blocks=5)), ValueError, 'divisible'),
])
def test_bad_arguments_raise(kwargs, error, pattern):
    arch_given = 'arch' in kwargs
    with pytest.raises(error, match=pattern):
        MixerMiT(**kwargs) if arch_given else tiny(**kwargs)


def test_arch_sizes_and_agreeing_explicit_values():
    model = MixerMiT(arch='b3', embed_dims=64, num_layers=[3, 4, 18, 3])
    assert [len(layers) for _, layers, _ in model.layers] == [3, 4, 18, 3]
    assert [norm.normalized_shape[0] for _, _, norm in model.layers] == [64, 128, 320, 512]
    b0 = MixerMiT(arch='b0')
    assert [norm.normalized_shape[0] for _, _, norm in b0.layers] == [32, 64, 160, 256]


@pytest.mark.parametrize('init_cfg', [dict(type='Kaiming'), dict(type='Pretrained'),
                                      [dict(type='Pretrained', checkpoint='a.pth')]])
def test_unsupported_init_cfg_raises(init_cfg):
    with pytest.raises(ValueError, match='Pretrained'):
        tiny(init_cfg=init_cfg)


# ---------------------------------------------------------------- pretrained MiT checkpoints


def mmseg_to_official(state: dict) -> OrderedDict:
    """The SegFormer authors' naming (mix_transformer.py), written from the official layout:
    the inverse of mmseg's conversion, used here to fabricate official checkpoints."""
    out = OrderedDict()
    for key, value in state.items():
        stage, part, rest = re.match(r'layers\.(\d+)\.(\d)\.(.*)', key).groups()
        s = int(stage) + 1
        if part == '0':
            out[f'patch_embed{s}.' + rest.replace('projection.', 'proj.')] = value
        elif part == '2':
            out[f'norm{s}.{rest}'] = value
        else:
            layer, name = rest.split('.', 1)
            prefix = f'block{s}.{layer}.'
            if name == 'attn.attn.in_proj_weight' or name == 'attn.attn.in_proj_bias':
                param = name.rsplit('_', 1)[1]
                channels = value.shape[0] // 3
                out[prefix + f'attn.q.{param}'] = value[:channels]
                out[prefix + f'attn.kv.{param}'] = value[channels:]
            elif name.startswith('attn.attn.out_proj.'):
                out[prefix + 'attn.proj.' + name.rsplit('.', 1)[1]] = value
            elif name.startswith(('attn.sr.', 'attn.norm.', 'norm1.', 'norm2.')):
                out[prefix + name] = value
            else:
                index, param = re.match(r'ffn\.layers\.(\d)\.(\w+)', name).groups()
                official = {'0': 'mlp.fc1.', '1': 'mlp.dwconv.dwconv.', '4': 'mlp.fc2.'}[index]
                if index in '04' and param == 'weight':
                    value = value.flatten(1)  # 1x1 conv -> Linear
                out[prefix + official + param] = value
    out['head.weight'] = torch.randn(1000, state['layers.3.2.weight'].shape[0])
    out['head.bias'] = torch.randn(1000)
    return out


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
    """A random mmseg MiT (tiny, 2 layers per stage) saved in mmseg's and the official layout."""
    torch.manual_seed(1)
    reference = MixVisionTransformer(**{**TINY, 'num_layers': [2, 2, 2, 2]})
    for param in reference.parameters():  # no default values (LN = 1/0) that could hide a miss
        torch.nn.init.normal_(param)
    state = OrderedDict((k, v.clone()) for k, v in reference.state_dict().items())
    folder = tmp_path_factory.mktemp('ckpt')
    paths = {'mmseg': folder / 'mit_mmseg.pth', 'official': folder / 'mit_b_official.pth',
             'segmentor': folder / 'segmentor.pth'}
    torch.save(state, paths['mmseg'])
    torch.save(mmseg_to_official(state), paths['official'])
    torch.save({'meta': {'note': 'segmentor'}, 'state_dict': OrderedDict(
        [('backbone.' + k, v) for k, v in state.items()]
        + [('decode_head.conv_seg.weight', torch.randn(19, 8, 1, 1))])}, paths['segmentor'])
    return state, {k: str(v) for k, v in paths.items()}


def test_official_renaming_round_trip(checkpoints):
    state, paths = checkpoints
    converted = official_to_mmseg(torch.load(paths['official']))
    assert set(converted) == set(state) | {'head.weight', 'head.bias'}
    for key, value in state.items():
        assert torch.equal(converted[key], value), key


@pytest.fixture
def mm_log():
    """Messages that afno_seg sends to mmengine's current logger during the test."""
    messages = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())
    # A fresh current logger at DEBUG: earlier tests may have left a current instance whose
    # level filters INFO out (a Runner built with log_level='WARNING', say).
    logger = MMLogger.get_instance(f'test_backbone_{uuid.uuid4().hex}', log_level='DEBUG')
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)


@pytest.mark.parametrize('layout', ['mmseg', 'official', 'segmentor'])
@pytest.mark.parametrize('name', ['esa', 'afno', 'gfn', 'sa'])
def test_pretrained_loads_every_non_mixer_tensor(checkpoints, layout, name, mm_log):
    state, paths = checkpoints
    torch.manual_seed(0)
    model = tiny(mixers=MIXERS[name], num_layers=[2, 2, 2, 2],
                 init_cfg=dict(type='Pretrained', checkpoint=paths[layout]))
    model.init_weights()
    log = '\n'.join(mm_log)
    mixer_key = re.compile(r'layers\.\d+\.1\.\d+\.attn\.')
    new = []
    for key, value in model.state_dict().items():
        if not mixer_key.match(key):
            assert torch.equal(value, state[key]), key
        elif key in state and state[key].shape == value.shape:
            assert torch.equal(value, state[key]), key  # attention tensors that fit load too
        else:
            new.append(key)
    # mmengine's load_state_dict names each tensor that did not load, each unused one
    missing = re.search(r'missing keys in source state_dict: (.*)', log)
    missing = set(missing.group(1).split(', ') if missing else ())
    assert missing == {key for key in new if key not in state}
    assert all(f'size mismatch for {key}:' in log for key in new if key in state)
    if not new:
        assert name in ('esa', 'sa')
    if name in ('afno', 'gfn'):
        assert new
        assert 'attn.attn.in_proj_weight' in log  # checkpoint attention reported as unused
    if name == 'sa':  # q/k/v/out projections load; the reduction conv and its norm are unused
        assert 'layers.0.1.0.attn.sr.weight' in log
    if layout == 'official':
        assert 'head.weight' in log  # the ImageNet classifier is reported as skipped


def test_pretrained_missing_file_or_url_is_one_error(tmp_path):
    """Without the training preflight (which refuses it first, test_mixer_switch.py) the
    backbone names the file; a URL is fetched as mmengine would (docs/security.md), and a failed
    download is one line too (port 9 on loopback: refused at once, nothing leaves the machine)."""
    from afno_seg.engine.checkpoint import CheckpointError
    path = tmp_path / 'nowhere' / 'mit_b3.pth'
    model = tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(CheckpointError, match=r'not found: .*nowhere/mit_b3\.pth'):
        model.init_weights()
    url = 'http://127.0.0.1:9/mit_b3.pth'
    with pytest.raises(CheckpointError, match=f'could not download checkpoint {url}'):
        tiny(init_cfg=dict(type='Pretrained', checkpoint=url)).init_weights()


def test_pretrained_wrong_arch_is_an_error(checkpoints):
    _, paths = checkpoints
    for kwargs, pattern in [(dict(num_layers=[1, 2, 2, 2]), r'not in the model \(e\.g\. '
                             r'layers\.0\.1\.1\.norm1'),
                            (dict(num_layers=[2, 2, 2, 3]), r'layers: \d+ missing \(e\.g\. '
                             r'layers\.3\.1\.2\.norm1'),
                            (dict(num_layers=[2, 2, 2, 2], embed_dims=8), 'of other shape')]:
        model = tiny(**kwargs, init_cfg=dict(type='Pretrained', checkpoint=paths['official']))
        with pytest.raises(RuntimeError, match=pattern):
            model.init_weights()


def test_pretrained_not_a_mit_checkpoint(tmp_path):
    path = tmp_path / 'resnet.pth'
    torch.save({'conv1.weight': torch.zeros(1)}, path)
    with pytest.raises(ValueError, match='not a MiT checkpoint'):
        tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path))).init_weights()


def test_converter_tool_writes_the_mmseg_layout(checkpoints, tmp_path, capsys):
    import importlib.util
    state, paths = checkpoints
    spec = importlib.util.spec_from_file_location(
        'mit2afno_seg', ROOT / 'tools' / 'model_converters' / 'mit2afno_seg.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / 'converted.pth'
    assert tool.main([paths['official'], str(out)]) == 0
    converted = torch.load(out)
    assert set(converted) == set(state)  # the classifier head is dropped
    for key, value in state.items():
        assert torch.equal(converted[key], value), key
    # mmseg's own MixVisionTransformer loads the result strictly.
    MixVisionTransformer(**{**TINY, 'num_layers': [2, 2, 2, 2]}).load_state_dict(converted)
    assert tool.main([paths['mmseg'], str(tmp_path / 'again.pth')]) == 1
    assert 'already in the mmseg layout' in capsys.readouterr().err
    assert tool.main([str(tmp_path / 'missing.pth'), str(out)]) == 1


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
