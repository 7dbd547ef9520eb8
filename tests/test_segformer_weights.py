"""Real SegFormer weights, tested against their own frameworks with random weights (nothing is
downloaded): transformers' SegformerForSemanticSegmentation (whole models, B0 and B3 depths) and
SegformerModel (the MiT encoder of ``nvidia/mit-b*``) saved with ``save_pretrained``, converted
and loaded, give the same logits / hidden states; mmseg's own SegFormer equals its ``--mixer esa``
derivation; the all-MLP head's low-resolution form equals the released one in values and
gradients; a converted SegFormer turned into an AFNO model by ``--mixer`` + ``load_from`` loads
everything but the new mixers, and the log names exactly those.

Cost: models are built at their real depths with the published widths for B0 and small widths
for B3's depths (the mapping does not depend on width); inputs are 64 x 96.
"""
import json
import re

import pytest
import torch
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS
from transformers import (
    SegformerConfig,
    SegformerForImageClassification,
    SegformerForSemanticSegmentation,
)

from afno_seg.backbones import MixerMiT
from afno_seg.engine import UserError, load_config
from afno_seg.engine.checkpoint import read_state_dict
from afno_seg.engine.checkpoint_fit import CheckpointMismatchError, load_state

from conftest import ROOT, load_script

PUBLISHED = ROOT / 'configs' / 'published'
B3_CITYSCAPES = str(PUBLISHED / 'segformer_mit-b3_cityscapes-1024x1024.py')
B0_ADE20K = str(PUBLISHED / 'segformer_mit-b0_ade20k-512x512.py')
# transformers sizes: B0 ADE20K as published; B3's depths at half B0's widths, 19 classes.
SIZES = {
    'b0': dict(depths=[2, 2, 2, 2], hidden_sizes=[32, 64, 160, 256], decoder_hidden_size=256,
               num_labels=150),
    'b3-depths': dict(depths=[3, 4, 18, 3], hidden_sizes=[16, 32, 80, 128],
                      decoder_hidden_size=48, num_labels=19),
}
INPUT = (1, 3, 64, 96)  # non-square: rows and columns must not be swapped anywhere


def hf_config(name: str) -> SegformerConfig:
    return SegformerConfig(**SIZES[name], num_attention_heads=[1, 2, 5, 8])


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """No parameter or statistic at a default value (LN 1/0, BN 0/1) that could hide a miss."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=generator)
            if name.endswith('running_var'):
                tensor.copy_(0.5 + noise.abs())
            elif tensor.dim() == 1:  # norms and biases
                one = 'norm' in name and name.endswith('weight')
                tensor.copy_(float(one) + 0.1 * noise)
            else:
                tensor.copy_(noise * tensor.shape[1] ** -0.5 if tensor.dim() == 2 else
                             noise * tensor[0].numel() ** -0.5)
    return model.eval()


def our_model(name: str, checkpoint: str):
    """B0: the published B0 ADE20K config as it is; B3's depths: the published B3 Cityscapes
    config at the small widths. Loaded strictly; SyncBN as BN (one process)."""
    options = {'model.backbone.init_cfg': None,
               'model.decode_head.norm_cfg': dict(type='BN', requires_grad=True)}
    config = B0_ADE20K
    if name != 'b0':
        sizes, config = SIZES[name], B3_CITYSCAPES
        options.update({'model.backbone.arch': None,
                        'model.backbone.embed_dims': sizes['hidden_sizes'][0],
                        'model.backbone.num_layers': sizes['depths'],
                        'model.backbone.num_heads': [1, 2, 5, 8],
                        'model.decode_head.in_channels': sizes['hidden_sizes'],
                        'model.decode_head.channels': sizes['decoder_hidden_size']})
    cfg = load_config(config, cfg_options=options, pretrained=False)
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    load_state(model, read_state_dict(checkpoint), checkpoint)
    return model.eval()


@pytest.fixture(scope='module', params=list(SIZES))
def published(request, tmp_path_factory):
    """A random transformers SegformerForSemanticSegmentation saved with save_pretrained."""
    torch.manual_seed(0)
    model = randomise(SegformerForSemanticSegmentation(hf_config(request.param)))
    folder = tmp_path_factory.mktemp(f'segformer-{request.param}')
    model.save_pretrained(folder)
    return request.param, model, folder


def test_whole_model_logits_equal_transformers(published, tmp_path):
    name, hf, folder = published
    from safetensors import safe_open
    with safe_open(str(folder / 'model.safetensors'), 'pt') as f:  # the Hub files' names
        keys = set(f.keys())
    assert 'segformer.encoder.block.0.0.attention.self.query.weight' in keys
    assert 'decode_head.linear_c.0.proj.weight' in keys
    out = tmp_path / 'converted.pth'
    checked = ['--config', B0_ADE20K] if name == 'b0' else []  # fits it exactly, or raises
    load_script('tools/model_converters/segformer2afno_seg.py').main([str(folder), str(out),
                                                                      *checked])
    ours = our_model(name, str(out))
    x = torch.randn(INPUT, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(pixel_values=x).logits
        got = ours.decode_head(ours.extract_feat(x))
    assert got.shape == expected.shape == (1, SIZES[name]['num_labels'], 16, 24)
    print(f'{name}: max |logits difference| {(got - expected).abs().max():.2e}, '
          f'max |logit| {expected.abs().max():.1f}')
    assert (got - expected).abs().max() < 1e-4, (got - expected).abs().max()
    if name == 'b0':  # the classes travel with the weights; the model exports to ONNX
        assert len(torch.load(out)['meta']['classes']) == 150
        from afno_seg.deployment import export_onnx, onnx_max_abs_difference, onnx_session
        path = export_onnx(ours, INPUT[2:], str(tmp_path / 'segformer.onnx'))
        assert onnx_max_abs_difference(ours, onnx_session(path), x) < 1e-4


def test_converter_checks_the_config_and_refuses_a_mit_encoder(published, tmp_path, capsys):
    name, _, folder = published
    tool = load_script('tools/model_converters/segformer2afno_seg.py')
    if name == 'b0':  # B0's sizes against the B3 config: refused, naming a tensor and shapes
        with pytest.raises(CheckpointMismatchError, match=r'x\.pth \(converted from .*of other '
                           r'shape \(e\.g\. backbone\.layers\.0\.0\.projection\.weight: checkpoint '
                           r'\(32, 3, 7, 7\), model \(64, 3, 7, 7\)\)'):
            tool.main([str(folder), str(tmp_path / 'x.pth'), '--config', B3_CITYSCAPES])
        assert not (tmp_path / 'x.pth').exists()
    encoder = tmp_path / 'mit.pth'
    torch.save({'layers.0.0.projection.weight': torch.zeros(1)}, encoder)
    with pytest.raises(UserError, match='not a transformers SegformerForSemanticSegmentation'):
        tool.main([str(encoder), str(tmp_path / 'y.pth')])


@pytest.mark.parametrize('generation', ['hub', 'transformers5'])
def test_mit_encoder_equals_transformers_hidden_states(generation, tmp_path):
    """``nvidia/mit-b*`` is a SegformerForImageClassification: its encoder, read from the folder
    (Hub names) or from ``torch.save(model.state_dict())`` (transformers 5's module names)."""
    torch.manual_seed(0)
    hf = randomise(SegformerForImageClassification(hf_config('b0')))
    if generation == 'hub':
        hf.save_pretrained(tmp_path)
        path = str(tmp_path)
        # README's two lines: the folder converted offline to the file the configs name
        tool = load_script('tools/model_converters/mit2afno_seg.py')
        assert tool.main([path, str(tmp_path / 'mit_b0.pth')]) == 0
        mmseg_mit = dict(type='MixVisionTransformer', embed_dims=32, num_layers=[2, 2, 2, 2],
                         num_heads=[1, 2, 5, 8])
        MODELS.build(mmseg_mit).load_state_dict(torch.load(tmp_path / 'mit_b0.pth'))  # strict
    else:
        path = str(tmp_path / 'state.pth')
        torch.save(hf.state_dict(), path)
        assert any(k.startswith('segformer.stages.0.blocks.0.attention.q_proj')
                   for k in hf.state_dict())
    ours = MixerMiT(arch='b0', init_cfg=dict(type='Pretrained', checkpoint=path))
    ours.init_weights()
    ours.eval()
    x = torch.randn(INPUT, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf.segformer(pixel_values=x, output_hidden_states=True).hidden_states
        got = ours(x)
    assert len(got) == len(expected) == 4
    for stage, (a, b) in enumerate(zip(got, expected)):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-4, stage


def test_mit_folder_config_json_is_checked(tmp_path):
    hf = SegformerForImageClassification(hf_config('b0'))
    hf.save_pretrained(tmp_path)
    model = MixerMiT(arch='b1', init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path)))
    with pytest.raises(CheckpointMismatchError, match=re.escape(
            'describes a MiT of depths [2, 2, 2, 2], widths [32, 64, 160, 256]; the backbone '
            'has depths [2, 2, 2, 2], widths [64, 128, 320, 512]')):
        model.init_weights()
    (tmp_path / 'model.safetensors').unlink()
    with pytest.raises(UserError, match='is a folder without model.safetensors or '
                       'pytorch_model.bin'):
        model.init_weights()
    (tmp_path / 'config.json').write_text(json.dumps({'model_type': 'vit'}))
    torch.save({}, tmp_path / 'pytorch_model.bin')
    with pytest.raises(CheckpointMismatchError, match="a MiT of model_type 'vit'"):
        model.init_weights()


def test_mmseg_segformer_equals_its_mixer_esa_derivation(tmp_path):
    """mmseg's zoo layout: its own B0 ADE20K model and ``--mixer esa`` of the same config, one
    random state dict, the same logits."""
    config = 'mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py'
    bn = {'model.decode_head.norm_cfg': dict(type='BN', requires_grad=True)}
    init_default_scope('mmseg')
    reference = load_config(config, cfg_options=bn)
    reference.model.backbone.init_cfg = None
    mmseg_model = randomise(MODELS.build(reference.model))
    path = str(tmp_path / 'zoo.pth')
    torch.save({'state_dict': mmseg_model.state_dict()}, path)
    ours = MODELS.build(load_config(config, cfg_options=bn, mixer='esa', pretrained=False).model)
    assert type(ours.backbone).__name__ == 'MixerMiT'
    load_state(ours, read_state_dict(path), path)
    ours.eval()
    x = torch.randn(INPUT, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        diff = (ours.decode_head(ours.extract_feat(x))
                - mmseg_model.decode_head(mmseg_model.extract_feat(x))).abs().max()
    assert diff < 1e-5, diff


def test_all_mlp_head_equals_the_released_form_with_gradients():
    """Concatenation at 1/4 resolution (deepest stage first), fuse, BN, ReLU, classifier."""
    import torch.nn.functional as F

    from afno_seg.decode_heads import AllMLPHead
    torch.manual_seed(0)
    head = AllMLPHead(in_channels=[8, 16, 24, 32], in_index=[0, 1, 2, 3], channels=12,
                      num_classes=5, dropout_ratio=0., norm_cfg=dict(type='BN'))
    randomise(head).train()  # batch statistics: the norm sees the sum, not its parts
    maps = [torch.randn(2, c, 15 // 2 ** i + 1, 22 // 2 ** i + 1, requires_grad=True)
            for i, c in enumerate([8, 16, 24, 32])]

    def released(xs):
        size = xs[0].shape[2:]
        parts = [F.interpolate(F.linear(x.flatten(2).transpose(1, 2), lin.weight, lin.bias)
                               .transpose(1, 2).reshape(x.shape[0], -1, *x.shape[2:]),
                               size=size, mode='bilinear', align_corners=False)
                 for x, lin in zip(xs, head.linear_c)]
        fuse = head.linear_fuse
        return head.conv_seg(fuse.activate(fuse.norm(fuse.conv(torch.cat(parts[::-1], 1)))))
    results = []
    for form in (head, released):
        head.zero_grad()
        out = form(maps)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
                                    maps + [p for p in head.parameters()])
        results.append((out, grads))
    (out, grads), (ref, ref_grads) = results
    assert (out - ref).abs().max() < 1e-5
    for got, want in zip(grads, ref_grads):
        assert (got - want).abs().max() < 1e-4 * max(1., want.abs().max().item())


def test_trained_segformer_becomes_afno(tiny_demo_data, tmp_path, capsys):
    """A converted transformers SegFormer (the tiny config's sizes) as ``load_from`` of
    ``--mixer afno+afno+esa+esa``: one training iteration; mmengine's missing-keys line names
    exactly the new AFNO tensors of stages 1-2; stages 3-4's attention and the head load."""
    from afno_seg.engine import run_train
    torch.manual_seed(0)
    hf = SegformerForSemanticSegmentation(SegformerConfig(
        depths=[2, 2, 2, 2], hidden_sizes=[16, 32, 80, 128], num_attention_heads=[1, 2, 5, 8],
        decoder_hidden_size=32, num_labels=19))
    hf.save_pretrained(tmp_path / 'hf')
    converted = tmp_path / 'segformer.pth'
    load_script('tools/model_converters/segformer2afno_seg.py').main(
        [str(tmp_path / 'hf'), str(converted)])
    options = {f'{loader}.dataset.data_root': f'{tiny_demo_data}/' for loader in
               ('train_dataloader', 'val_dataloader', 'test_dataloader')}
    options.update({'load_from': str(converted), 'model.decode_head.type': 'AllMLPHead',
                    'train_cfg.max_iters': 1, 'val_cfg': None, 'val_dataloader': None,
                    'val_evaluator': None, 'default_hooks.checkpoint.interval': 1})
    work_dir = tmp_path / 'work'
    run_train(str(ROOT / 'tests' / 'configs' / 'tiny_demo.py'), str(work_dir), options,
              mixer='afno+afno+esa+esa')
    log = next(work_dir.glob('*/*.log')).read_text()
    new = re.search(r'missing keys in source state_dict: (.*)', capsys.readouterr().out)
    assert new, log[-3000:]
    ours = torch.load(work_dir / 'iter_1.pth', weights_only=False)['state_dict']
    afno = [k for k in ours if re.match(r'backbone\.layers\.[01]\.1\.\d+\.attn\.', k)]
    assert sorted(new.group(1).split(', ')) == sorted(afno)  # the new mixers, nothing else
    assert f'Load checkpoint from {converted}' in log
    # the fine-tuned model through the inference tool, with the config the run wrote
    image = next((tiny_demo_data / 'leftImg8bit' / 'val').rglob('*.png'))
    derived = next(work_dir.glob('tiny_demo*.py'))
    load_script('tools/inference.py').main([str(derived), str(work_dir / 'iter_1.pth'),
                                            str(image), '--out-dir', str(tmp_path / 'pred'),
                                            '--no-progress'])
    assert json.loads((tmp_path / 'pred' / 'summary.json').read_text())['num_inputs'] == 1
