"""ONNX export: AFNO's (and FNO's) real-arithmetic export form equals the training path, every
mixer exports in a whole segmentor and onnxruntime matches PyTorch, tools/deployment/pytorch2onnx.py
writes a checked file, and --dynamic works where it is allowed."""
import os
import re

import onnx
import pytest
import torch
from mmengine.registry import init_default_scope

from afno_seg.deployment import (
    SegmentorLogits,
    export_network,
    export_onnx,
    onnx_max_abs_difference,
    onnx_session,
    static_shape_mixers,
)
from afno_seg.engine.errors import UserError
from afno_seg.mixers import find_variant, mixer_variants, use_form
from afno_seg.mixers.afno import AFNOMixer
from afno_seg.mixers.export import afno_op, fno_op
from afno_seg.mixers.fno import FNOMixer
from afno_seg.mixers.forms import select

from conftest import (
    ONE_LAYER,
    TINY_CONFIG,
    check,
    load_script,
    onnx_ops,
    run_tool,
    save_segmentor_checkpoint,
    tiny_segmentor,
)

FAST_EXPORT = ('afno', 'gfn')  # the rest of the variants export in the slow test


@pytest.fixture(autouse=True)
def mmseg_scope():
    init_default_scope('mmseg')


@pytest.mark.parametrize('shrink', ['split', 'magnitude'])
@pytest.mark.parametrize('fraction, hw', [(1.0, (6, 9)), (0.25, (12, 10)), (0.5, (7, 7))])
def test_afno_real_arithmetic_equals_the_fused_and_composed_paths(shrink, fraction, hw):
    """AFNO's ``op`` export form (real arithmetic) equals its ``fast`` and ``reference`` forms."""
    torch.manual_seed(0)
    mixer = AFNOMixer(16, num_blocks=4, hidden_size_factor=2, sparsity_threshold=0.01,
                      hard_thresholding_fraction=fraction, shrink=shrink).double()
    with torch.no_grad():
        for p in mixer.parameters():
            p.mul_(20)  # weights large enough that ReLU and the shrink both cut somewhere
    x = torch.randn(2, hw[0] * hw[1], 16, dtype=torch.float64)
    out = {}
    for form in ('op', 'fast', 'reference'):
        with use_form(form):
            out[form] = mixer(x, hw)
    torch.testing.assert_close(out['op'], out['fast'], rtol=0, atol=1e-12)
    torch.testing.assert_close(out['op'], out['reference'], rtol=0, atol=1e-12)
    assert (out['op'] - x).abs().max() > 1e-3  # the mixer did something beyond its residual


@pytest.mark.parametrize('mixer_cls, function', [(AFNOMixer, afno_op), (FNOMixer, fno_op)])
def test_export_path_is_taken_only_during_export(monkeypatch, mixer_cls, function):
    torch.manual_seed(0)
    mixer = mixer_cls(16, **({'num_blocks': 4} if mixer_cls is AFNOMixer else {'modes': (3, 3)}))
    x = torch.randn(1, 8 * 10, 16)
    assert select(mixer).func is not function  # training/inference keep the complex path
    expected = mixer(x, (8, 10))
    monkeypatch.setattr(torch.onnx, 'is_in_onnx_export', lambda: True)
    assert select(mixer).func is function
    torch.testing.assert_close(mixer(x, (8, 10)), expected, rtol=1e-5, atol=1e-6)


def check_variant_exports(variant, tmp_path):
    model = tiny_segmentor(variant)
    path = export_onnx(model, (64, 96), str(tmp_path / f'{variant}.onnx'), dft='op')
    onnx.checker.check_model(path)
    graph = onnx.load(path)
    assert {opset.domain for opset in graph.opset_import} <= {'', 'ai.onnx'} | {
        f.domain for f in graph.functions}  # standard ops only (local functions allowed)
    inputs = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    session = onnx_session(path)
    assert session.get_outputs()[0].shape == [1, 19, 64, 96]
    assert onnx_max_abs_difference(model, session, inputs) < 1e-4
    return onnx_ops(path)


@pytest.mark.parametrize('variant', FAST_EXPORT)
def test_mixer_exports_and_matches_onnxruntime(variant, tmp_path):
    ops = check_variant_exports(variant, tmp_path)
    assert 'DFT' in ops


@pytest.mark.slow
@pytest.mark.parametrize('variant', sorted(set(mixer_variants()) - set(FAST_EXPORT)))
def test_every_other_mixer_exports_and_matches_onnxruntime(variant, tmp_path):
    ops = check_variant_exports(variant, tmp_path)
    assert ('DFT' in ops) == find_variant(variant).spectral, sorted(ops)


def test_pytorch2onnx_tool_writes_and_checks_the_file(tmp_path):
    model = tiny_segmentor('afno')
    checkpoint = save_segmentor_checkpoint(model, tmp_path / 'afno.pth')
    out = tmp_path / 'onnx' / 'afno.onnx'
    result = check(run_tool('tools/deployment/pytorch2onnx.py', TINY_CONFIG, checkpoint,
                            '--shape', '64', '128', '--out', str(out), '--cfg-options',
                            ONE_LAYER))
    match = re.search(r'max abs difference ([0-9.e+-]+)', result.stdout)
    assert match and float(match.group(1)) < 1e-4, result.stdout
    # The file holds the checkpoint's weights: it reproduces this model's logits.
    inputs = torch.randn(1, 3, 64, 128, generator=torch.Generator().manual_seed(3))
    assert onnx_max_abs_difference(model, onnx_session(str(out)), inputs) < 1e-4
    assert 'pkg_resources' not in result.stderr


DYNAMIC = ('gfn', )  # fast; the slow test below covers every other variant


def check_dynamic_export(variant, tmp_path):
    model = tiny_segmentor(variant)
    path = export_onnx(model, (64, 96), str(tmp_path / f'{variant}.onnx'), dynamic=True)
    session = onnx_session(path)
    assert session.get_inputs()[0].shape[2:] == ['height', 'width']
    for shape in ((64, 96), (96, 160), (72, 120)):
        inputs = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(2))
        assert onnx_max_abs_difference(model, session, inputs) < 1e-4
        with torch.no_grad():
            assert tuple(SegmentorLogits(model)(inputs).shape) == (1, 19, *shape)


@pytest.mark.parametrize('variant', DYNAMIC)
def test_dynamic_export_runs_other_sizes(variant, tmp_path):
    check_dynamic_export(variant, tmp_path)


class MixerOnGrid(torch.nn.Module):
    """``(1, C, H, W) -> mixer`` on the tokens of that grid, back to ``(1, C, H, W)``: one mixer
    exported with symbolic H, W (the segmentor around it is the same for every variant)."""

    def __init__(self, mixer) -> None:
        super().__init__()
        self.mixer = mixer

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = grid.shape
        tokens = grid.flatten(2).transpose(1, 2)
        return self.mixer(tokens, (height, width)).transpose(1, 2).reshape(grid.shape)


@pytest.mark.parametrize('variant', sorted(set(mixer_variants()) - set(DYNAMIC)))
def test_dynamic_export_of_every_other_mixer_or_a_clear_refusal(variant, tmp_path):
    """Each other mixer alone with dynamic H, W runs other grids (odd, non-square) in
    onnxruntime; a mixer that declares a static shape is refused before anything is written."""
    segmentor = tiny_segmentor(variant)
    if static_shape_mixers(segmentor):
        with pytest.raises(UserError, match='cannot be exported with dynamic H, W'):
            export_onnx(segmentor, (64, 96), str(tmp_path / 'x.onnx'), dynamic=True)
        assert not (tmp_path / 'x.onnx').exists()
        return
    network = MixerOnGrid(segmentor.backbone.layers[1][1][0].attn).eval()  # stage 2: sr 4
    example = torch.randn(1, network.mixer.embed_dims, 8, 12)
    path = export_network(network, example, str(tmp_path / f'{variant}.onnx'), dynamic=True,
                          min_size=4)
    session = onnx_session(path)
    for shape in ((8, 12), (11, 7)):
        inputs = torch.randn(1, network.mixer.embed_dims, *shape,
                             generator=torch.Generator().manual_seed(2))
        (actual, ) = session.run(None, {session.get_inputs()[0].name: inputs.numpy()})
        with torch.no_grad():
            expected = network(inputs).numpy()
        assert abs(actual - expected).max() < 1e-4, shape


def test_dynamic_shape_declarations():
    assert static_shape_mixers(tiny_segmentor('afno')) == []
    assert static_shape_mixers(tiny_segmentor('afno25')) == ['AFNOMixer']
    assert static_shape_mixers(tiny_segmentor('fno')) == ['FNOMixer']
    assert static_shape_mixers(tiny_segmentor('ls')) == ['LongShortAttentionMixer']


def test_bad_checkpoint_is_named_by_the_export_tool(tmp_path):
    garbage = tmp_path / 'garbage.pth'
    garbage.write_text('not a checkpoint')
    result = run_tool('tools/deployment/pytorch2onnx.py', TINY_CONFIG, str(garbage), '--shape',
                      '64', '64', '--out', str(tmp_path / 'x.onnx'))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and 'garbage.pth' in lines[0] and 'not a readable' in lines[0], lines
    assert not os.path.exists(tmp_path / 'x.onnx')


def _two_layer_graph(path) -> str:
    """``tanh(sigmoid(x W1) W2)`` with a symbolic first dimension: 2 MatMul nodes, 1 Sigmoid,
    1 Tanh (none of which onnxruntime fuses)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 64), dtype=np.float32), name)
               for name in ('w1', 'w2')]
    nodes = [helper.make_node('MatMul', ['x', 'w1'], ['h'], name='first'),
             helper.make_node('Sigmoid', ['h'], ['s'], name='squash'),
             helper.make_node('MatMul', ['s', 'w2'], ['z'], name='second'),
             helper.make_node('Tanh', ['z'], ['y'], name='out')]
    graph = helper.make_graph(
        nodes, 'two_layers', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['n', 64])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['n', 64])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 20)], ir_version=10)
    onnx.save(model, str(path))
    return str(path)


def test_profile_tool_reports_kernel_time_by_op_and_node(tmp_path):
    from afno_seg.deployment.benchmark import profile_onnx
    path = _two_layer_graph(tmp_path / 'two.onnx')
    profile = profile_onnx(path, runs=4, input_shape=[2048, 64])
    assert set(profile.ops) == {'MatMul', 'Sigmoid', 'Tanh'}
    assert sorted(n.name for n in profile.nodes) == ['first', 'out', 'second', 'squash']
    matmuls = [n for n in profile.nodes if n.op == 'MatMul']
    assert {n.inputs for n in matmuls} == {'2048x64'}  # the prepacked weights not listed
    assert profile.ops['MatMul'] == pytest.approx(sum(n.ms for n in matmuls))
    assert len(profile.run_ms) == 4 and 0 < profile.kernel_ms <= 1.02 * max(profile.run_ms)
    with pytest.raises(UserError, match=r"input 'x' has symbolic dimensions.*--input-shape"):
        profile_onnx(path)

    tool = load_script('tools/deployment/profile_onnx.py')
    tool.main([path, '--input-shape', '16', '64', '--runs', '1', '--top', '1',
               '--out', str(tmp_path / 'profile.md')])
    table = (tmp_path / 'profile.md').read_text()
    assert '| MatMul |' in table and table.count('| Tanh |') == 1  # one op row, one node at most


def test_profile_summary_leaves_out_the_warm_up_run():
    from afno_seg.deployment.benchmark import _summarise

    def node(ts, dur, name='mm', op='MatMul'):
        return dict(cat='Node', name=f'{name}_kernel_time', ts=ts, dur=dur,
                    args=dict(op_name=op, input_type_shape=[{'float': [2, 3]}]))

    events = [dict(cat='Session', name='model_run', ts=0), node(1, 1000),
              dict(cat='Session', name='model_run', ts=10), node(11, 5), node(12, 2, 'r', 'Relu'),
              dict(cat='Session', name='model_run', ts=20), node(21, 7)]
    ops, nodes = _summarise(events, skip_runs=1)
    assert ops == {'MatMul': 12, 'Relu': 2}
    assert [(n.name, n.ms, n.inputs) for n in nodes] == [('mm', 12, '2x3'), ('r', 2, '2x3')]
