"""Every mixer in every runtime: the matmul DFT form equals the op form (PyTorch, float64) for
every spectral variant, its ONNX graph has no DFT node and matches PyTorch in onnxruntime on odd,
non-square grids; OpenVINO runs the matmul graph (tools/inference.py --backend openvino) and
refuses the op graph; compile=True (mmengine's switch) trains."""
import inspect

import cv2
import numpy as np
import pytest
import torch
from mmseg.registry import MODELS

from afno_seg.deployment import export_network, export_onnx, onnx_session, openvino_session
from afno_seg.deployment.onnx_export import INPUT_NAME, resolve_dft
from afno_seg.engine.errors import UserError
from afno_seg.mixers import MixerAlone, mixer_catalogue, mixer_variants, use_form
from afno_seg.mixers.catalogue import declared

from conftest import (
    ONE_LAYER,
    TINY_CONFIG,
    load_script,
    make_runner,
    onnx_ops,
    save_segmentor_checkpoint,
    tiny_segmentor,
)

# Every listed variant of the catalogue, the spectral ones apart (their matmul DFT form).
LISTED = tuple(entry.name for entry in mixer_catalogue())
SPECTRAL = tuple(entry.name for entry in mixer_catalogue() if entry.spectral)
GRIDS = [(9, 13), (12, 7)]  # odd and even, non-square


def small_mixer(variant: str, channels: int = 16):
    cfg = mixer_variants(include_unlisted=True)[variant]
    # the class's test example fills what a stage would (heads, a stored grid)
    cfg = dict(declared(MODELS.get(cfg['type']), 'example_args'), **cfg, embed_dims=channels)
    if 'num_blocks' in inspect.signature(MODELS.get(cfg['type'])).parameters:
        cfg['num_blocks'] = 4
    if cfg['type'] == 'FNOMixer':
        cfg['modes'] = (3, 4)  # a truncated band on these grids
    torch.manual_seed(0)
    mixer = MODELS.build(cfg)
    mixer.init_weights()
    return mixer


@pytest.mark.parametrize('hw', GRIDS, ids=lambda hw: f'{hw[0]}x{hw[1]}')
@pytest.mark.parametrize('variant', SPECTRAL)
def test_both_forms_compute_the_same_mixer(variant, hw):
    """Forward and gradients, float64: the matmul form is the same function as torch.fft's."""
    mixer = small_mixer(variant).double().train()
    x = torch.randn(2, hw[0] * hw[1], 16, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, hw[0] * hw[1], 16, dtype=torch.float64)
    results = {}
    for form in ('op', 'matmul'):
        with use_form(form):
            out = mixer(x, hw)
            results[form] = (out, *torch.autograd.grad(out, [x, *mixer.parameters()], grad))
    assert len(results['op']) == len(results['matmul']) == 2 + len(list(mixer.parameters()))
    for op_value, matmul_value in zip(*results.values()):
        torch.testing.assert_close(matmul_value, op_value, rtol=0, atol=1e-10)


def export_alone(mixer, hw, path, form):
    tokens = torch.randn(1, hw[0] * hw[1], 16, generator=torch.Generator().manual_seed(1))
    export_network(MixerAlone(mixer.eval(), hw), tokens, str(path), form=form)
    return tokens


@pytest.mark.parametrize('variant', LISTED)
def test_export_matches_pytorch_in_onnxruntime_and_openvino(variant, tmp_path):
    """The exported graph (a spectral mixer's: its matmul form, no DFT node) gives PyTorch's
    output in onnxruntime and in OpenVINO, on an odd, non-square grid."""
    hw = GRIDS[0]
    mixer = small_mixer(variant)
    path = tmp_path / f'{variant}.onnx'
    tokens = export_alone(mixer, hw, path, 'matmul')
    if variant in SPECTRAL:
        ops = onnx_ops(path)
        assert 'DFT' not in ops and 'MatMul' in ops, sorted(ops)
    with torch.no_grad():
        expected = mixer(tokens, hw).numpy()
    for session in (onnx_session(str(path)), openvino_session(str(path), threads=1)):
        (actual, ) = session.run(None, {INPUT_NAME: tokens.numpy()})
        assert np.abs(actual - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())


def test_dft_choice_and_dynamic_fallback():
    assert resolve_dft('auto', False) == ('matmul', '')
    assert resolve_dft('op', False) == ('op', '')
    assert resolve_dft('auto', True) == ('op', '')
    form, note = resolve_dft('matmul', True)
    assert form == 'op' and note.startswith('--dynamic: the matmul DFT needs fixed H, W')
    with pytest.raises(UserError, match='--dft must be one of auto, op, matmul'):
        resolve_dft('fft', False)


def test_openvino_backend_runs_the_matmul_graph(tiny_demo_data, tmp_path):
    """AFNO-25% (a truncated band): tools/inference.py on the matmul export with OpenVINO agrees
    with its PyTorch backend; the mixer alone on an odd, non-square grid matches PyTorch's
    logits in OpenVINO; the op graph is refused."""
    from mmengine.registry import init_default_scope
    init_default_scope('mmseg')
    model = tiny_segmentor('afno25')
    checkpoint = save_segmentor_checkpoint(model, tmp_path / 'afno25.pth')
    onnx_file = export_onnx(model, (64, 128), str(tmp_path / 'matmul.onnx'), dft='matmul')
    assert 'DFT' not in onnx_ops(onnx_file)
    images = str(tiny_demo_data / 'leftImg8bit' / 'val')
    inference = load_script('tools/inference.py')  # in-process: the tool's code, not its startup
    labels = {}
    for backend in ('pytorch', 'openvino'):
        extra = ['--backend', backend] + (['--onnx', onnx_file] if backend != 'pytorch' else [])
        inference.main([TINY_CONFIG, str(checkpoint), images, '--out-dir', str(tmp_path / backend),
                        '--no-progress', *extra, '--cfg-options', ONE_LAYER,
                        'model.backbone.mixers.hard_thresholding_fraction=0.25'])
        labels[backend] = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
                           for p in sorted((tmp_path / backend / 'labels').rglob('*.png'))]
    assert len(labels['pytorch']) == len(labels['openvino']) == 4  # every val image compared
    for torch_label, ov_label in zip(labels['pytorch'], labels['openvino']):
        assert np.mean(torch_label == ov_label) >= 0.999
    mixer = small_mixer('afno25')
    odd = tmp_path / 'odd.onnx'
    tokens = export_alone(mixer, GRIDS[0], odd, 'matmul')
    (actual, ) = openvino_session(str(odd), threads=1).run(None, {INPUT_NAME: tokens.numpy()})
    with torch.no_grad():
        expected = mixer(tokens, GRIDS[0]).numpy()
    assert np.abs(actual - expected).max() <= 1e-4
    op_file = tmp_path / 'op.onnx'
    export_alone(small_mixer('gfn'), GRIDS[0], op_file, 'op')
    with pytest.raises(UserError, match='holds ONNX DFT nodes.*--dft matmul'):
        openvino_session(str(op_file))


@pytest.mark.slow
def test_compile_true_trains(tiny_demo_data, tmp_path):
    """mmengine's ``compile`` switch (AFNO): dynamo traces the train step and the optimizer step
    stays eager (traced, it failed on mmengine's ConfigDict param groups; this test then fails).
    The eager backend runs dynamo's tracing, where that failure was, without AOTAutograd or
    inductor's code generation (minutes on a CPU); every mixer with compile=True (inductor) was
    run by hand (BENCHMARKS.md)."""
    import torch._dynamo
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    runner = make_runner(tiny_demo_data, tmp_path, compile=dict(backend='eager'),
                         **{'train_cfg.max_iters': 2, 'default_hooks.checkpoint.interval': 100})
    try:
        runner.train()
        assert runner.iter == 2
        assert hasattr(runner.model.train_step, '_torchdynamo_orig_callable')  # compiled
        assert torch._dynamo.utils.counters['stats']['unique_graphs'] >= 1  # and traced
    finally:
        torch._dynamo.reset()
