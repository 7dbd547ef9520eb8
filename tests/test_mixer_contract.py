"""One contract suite over every token mixer in the catalogue (``afno_seg.mixers.catalogue``).

The cases are each registered mixer's ``example_args`` and ``extra_examples``
(``mixer_examples.example_cases``) and the forms each declares (:mod:`afno_seg.mixers.forms`),
so a new mixer module is covered as soon as it is imported, with nothing edited here
(``docs/adding_a_mixer.md``): every declared form equals the formula, every mixer exports to
ONNX and runs in onnxruntime, and none breaks a torch.compile graph.
"""
import numbers

import numpy as np
import pytest
import torch

from afno_seg.backbones.stage import build_mixer, stage_arguments
from afno_seg.deployment import export_network, onnx_session
from afno_seg.deployment.onnx_export import INPUT_NAME
from afno_seg.mixers import (
    FORMS,
    MixerAlone,
    current_form,
    is_spectral,
    mixer_catalogue,
    registered_mixers,
    stores_grid,
    use_form,
)
from afno_seg.mixers.catalogue import declared
from afno_seg.mixers.forms import declared_forms, select
from afno_seg.registry import MMPRETRAIN_MODELS, MMSEG_MODELS

from conftest import onnx_ops
from mixer_examples import EXAMPLE_EMBED_DIMS, example_cases, o1_branch, relative_error

EMBED_DIMS = EXAMPLE_EMBED_DIMS
GRIDS = [(8, 8), (7, 12)]  # square; non-square with an odd side
CASES_ALL = [pytest.param(cls, kwargs, id=case_id) for case_id, cls, kwargs in example_cases()]
# Every form every case declares, read from the declarations.
FORM_CASES = [pytest.param(cls, kwargs, form, id=f'{case_id}-{form}')
              for case_id, cls, kwargs in example_cases() for form in declared_forms(cls)]
# One case a class (its example_args): the ONNX and torch.compile checks.
CLASS_CASES = [pytest.param(cls, kwargs, id=case_id) for case_id, cls, kwargs in example_cases()
               if case_id == cls.__name__]


def test_catalogue_lists_the_projects_mixers():
    names = set(registered_mixers())
    assert {'AFNOMixer', 'GlobalFilterMixer', 'FNetMixer', 'FNOMixer', 'AxialAttentionMixer',
            'EfficientSelfAttentionMixer', 'FullSelfAttentionMixer'} <= names
    variants = {entry.name: entry for entry in mixer_catalogue(include_unlisted=True)}
    assert {'afno', 'afno25', 'gfn', 'fnet', 'fno', 'esa', 'sa', 'axial', 'ls', 'aff', 'dff',
            'msca', 'pool'} <= set(variants)
    # A mixer's plain formula is a form (use_form('reference')), not a catalogue row.
    assert 'reference' in FORMS and not [name for name in variants if 'composed' in name]
    # Each declares its own variants: FullSelfAttentionMixer derives from ESA but is 'sa' only.
    assert [e.name for e in variants.values() if e.cls.__name__ == 'FullSelfAttentionMixer'] \
        == ['sa']


def test_spectral_and_stores_grid_are_derived():
    """``is_spectral``: an 'fft' FLOP term; ``stores_grid``: a ``base_hw_shape`` argument."""
    by_name = {cls.__name__: cls for cls in MMSEG_MODELS.module_dict.values()}
    spectral = {name for name in registered_mixers() if is_spectral(by_name[name])}
    assert {'AFNOMixer', 'AFFMixer', 'DynamicFilterMixer', 'GlobalFilterMixer', 'FNetMixer',
            'FNOMixer'} <= spectral
    assert not spectral & {'EfficientSelfAttentionMixer', 'AxialAttentionMixer', 'MSCAMixer',
                           'PoolingMixer'}
    assert [name for name in registered_mixers() if stores_grid(by_name[name])] == \
        ['DynamicFilterMixer', 'GlobalFilterMixer']


def build(cls, kwargs, seed=0):
    torch.manual_seed(seed)
    return cls(**kwargs).eval()


def tokens(batch, hw, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, hw[0] * hw[1], EMBED_DIMS, generator=generator).to(dtype)


@pytest.mark.parametrize('cls, kwargs', CASES_ALL)
@pytest.mark.parametrize('hw', GRIDS, ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_shapes_and_gradients(cls, kwargs, hw):
    mixer = build(cls, kwargs).train()
    x = tokens(2, hw).requires_grad_()
    out = mixer(x, hw)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert torch.isfinite(out).all()
    # A random projection, so that no gradient vanishes by symmetry (a plain sum would).
    (out * torch.randn_like(out)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, param in mixer.named_parameters():
        assert param.grad is not None, f'{name} got no gradient'
        assert torch.isfinite(param.grad).all(), f'{name} has a non-finite gradient'


@pytest.mark.parametrize('cls, kwargs', CASES_ALL)
def test_batch_independence(cls, kwargs):
    hw = (7, 9)
    mixer = build(cls, kwargs)
    x = tokens(3, hw)
    with torch.no_grad():
        batched = mixer(x, hw)
        perturbed = x.clone()
        perturbed[1:] = tokens(2, hw, seed=5)
        batched_perturbed = mixer(perturbed, hw)
        for i in range(3):
            torch.testing.assert_close(batched[i:i + 1], mixer(x[i:i + 1], hw), atol=1e-5,
                                       rtol=1e-5)
    # Changing samples 1 and 2 leaves sample 0 exactly as it was.
    torch.testing.assert_close(batched_perturbed[0], batched[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('registry', [MMSEG_MODELS, MMPRETRAIN_MODELS], ids=['mmseg', 'mmpretrain'])
@pytest.mark.parametrize('cls, kwargs', CASES_ALL)
def test_builds_from_config_in_both_registries(cls, kwargs, registry):
    torch.manual_seed(0)
    built = registry.build(dict(type=cls.__name__, **kwargs))
    assert type(built) is cls
    direct = build(cls, kwargs)  # the same seed gives the same parameters and outputs
    assert built.state_dict().keys() == direct.state_dict().keys()
    for name, value in built.state_dict().items():
        assert torch.equal(value, direct.state_dict()[name]), name
    x = tokens(2, (7, 12))
    with torch.no_grad():
        assert torch.equal(built.eval()(x, (7, 12)), direct(x, (7, 12)))


@pytest.mark.parametrize('cls, kwargs', CASES_ALL)
def test_bfloat16_autocast(cls, kwargs):
    """Under CPU bf16 autocast the output is finite and close to the fp32 output.

    * bf16 input -> bf16 output. Against the fp32 output on the same (bf16-rounded) input: the
      spectral mixers (fp32 islands) only round their output to bf16 (2^-9 relative; measured
      0.17% L2), within 0.5%; the attention mixers run their matmuls in bf16 (measured up to
      0.48%), within 1.5%.
    * fp32 input under autocast: the spectral mixers return fp32, the same as without autocast
      to float32 round-off; mixers whose last op is an autocast-listed matmul (attention) may
      return bf16, as ``nn.Linear`` does, within the same 1.5%.

    AFNO's weights make its spectral branch O(1) of the output (``o1_branch``): a forward that
    returned its residual ``x`` alone fails (the negative control below).
    """
    hw = (12, 20)
    mixer = o1_branch(build(cls, kwargs))
    x = tokens(2, hw)
    x_bf16 = x.bfloat16()
    with torch.no_grad():
        reference = mixer(x_bf16.float(), hw)
        reference_fp32 = mixer(x, hw)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out_bf16 = mixer(x_bf16, hw)
            out_fp32_input = mixer(x, hw)
    assert out_bf16.dtype == torch.bfloat16
    spectral = is_spectral(cls)
    if spectral:
        assert out_fp32_input.dtype == torch.float32
        assert relative_error(out_fp32_input, reference_fp32) < 1e-6
    else:
        assert out_fp32_input.dtype in (torch.float32, torch.bfloat16)
    tolerance = 0.005 if spectral else 0.015
    for out, ref in [(out_bf16, reference), (out_fp32_input, reference_fp32)]:
        assert torch.isfinite(out).all()
        assert relative_error(out, ref) < tolerance, relative_error(out, ref)
        assert relative_error(x, ref) > 10 * tolerance  # the mixer dropped: this test fails


@pytest.mark.parametrize('cls, kwargs', CASES_ALL)
def test_flops_positive_and_growing_with_grid(cls, kwargs):
    """... and ``flop_terms`` names the keys of ``flops()``."""
    mixer = build(cls, kwargs)
    assert set(mixer.flops((8, 8))) <= set(declared(cls, 'flop_terms')), declared(cls, 'flop_terms')
    previous = None
    for hw in [(8, 8), (8, 16), (16, 16), (32, 32)]:
        flops = mixer.flops(hw)
        assert isinstance(flops, dict) and flops
        assert all(isinstance(v, numbers.Real) and v >= 0 for v in flops.values()), flops
        total = sum(flops.values())
        assert total > 0
        if previous is not None:
            assert total > sum(previous.values()), (hw, flops, previous)
            for key in flops.keys() & previous.keys():
                assert flops[key] >= previous[key], (key, hw)
        previous = flops


@pytest.mark.parametrize('entry', mixer_catalogue(include_unlisted=True), ids=lambda e: e.name)
def test_every_variant_builds_for_a_stage_and_runs(entry):
    """The named settings (those of the configs and tables) at a narrow stage, built as MiT does."""
    torch.manual_seed(0)
    grid = (10, 12)
    mixer = build_mixer(entry.config, **stage_arguments(32, num_heads=2, sr_ratio=2,
                                                       base_hw_shape=grid)).eval()
    assert type(mixer) is entry.cls and entry.label
    with torch.no_grad():
        out = mixer(torch.randn(1, grid[0] * grid[1], 32), grid)
    assert out.shape == (1, grid[0] * grid[1], 32) and torch.isfinite(out).all()


# ------------------------------------------------------------------------------ forms
def test_form_switch_is_scoped_and_checked(monkeypatch):
    """One ContextVar: nested contexts restore the outer form; during an ONNX export with none
    set, 'op'; an unknown form is one line naming the choices."""
    assert current_form() == 'fast'
    with use_form('matmul'):
        assert current_form() == 'matmul'
        with use_form('reference'):
            assert current_form() == 'reference'
        assert current_form() == 'matmul'
        with pytest.raises(ValueError, match='must be one of fast, reference, op, matmul'):
            with use_form('fft'):
                pass
        assert current_form() == 'matmul'
    monkeypatch.setattr(torch.onnx, 'is_in_onnx_export', lambda: True)
    assert current_form() == 'op'
    with use_form('matmul'):
        assert current_form() == 'matmul'


@pytest.mark.parametrize('cls, kwargs, form', FORM_CASES)
def test_every_declared_form_equals_the_formula(cls, kwargs, form):
    """Each form a mixer declares is the same function as its formula: float64, forward and the
    gradients of the input and every parameter, on a non-square grid with an odd side."""
    hw = (7, 12)
    mixer = o1_branch(build(cls, kwargs)).double().train()  # O(1): ReLU and shrink both cut
    x = tokens(2, hw, dtype=torch.float64).requires_grad_()
    inputs = [x, *mixer.parameters()]
    grad = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    results = {}
    for name in (form, 'reference'):
        with use_form(name):
            out = mixer(x, hw)
            results[name] = (out, *torch.autograd.grad(out, inputs, grad))
    with use_form(form):  # the declared function is what runs
        assert select(mixer).func is declared_forms(cls)[form]
    with use_form('reference'):
        assert select(mixer) == mixer.formula
    for got, expected in zip(*results.values()):
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-8)
    assert (results[form][0] - x).abs().max() > 1e-3  # the mixer did something


@pytest.mark.slow  # 2-6 s a mixer (torch.export)
@pytest.mark.parametrize('cls, kwargs', CLASS_CASES)
def test_every_mixer_exports_and_runs_in_onnxruntime(cls, kwargs, tmp_path):
    """Each mixer alone, exported as ``tools/deployment/pytorch2onnx.py`` does (a fixed size:
    the ``matmul`` form), matches PyTorch in onnxruntime; a spectral mixer's graph has no DFT
    node. A new complex-valued mixer without an export form fails here."""
    hw = (9, 13)
    mixer = o1_branch(build(cls, kwargs))
    x = tokens(1, hw, seed=1)
    path = export_network(MixerAlone(mixer, hw), x, str(tmp_path / 'mixer.onnx'), form='matmul')
    (actual, ) = onnx_session(path).run(None, {INPUT_NAME: x.numpy()})
    with torch.no_grad():
        expected = mixer(x, hw).numpy()
    assert np.abs(actual - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())
    if is_spectral(cls):
        assert 'DFT' not in onnx_ops(path)


@pytest.mark.parametrize('cls, kwargs', CLASS_CASES + [
    case for case in CASES_ALL if case.id == 'AFNOMixer-quarter-hidden2'])  # AFNO-25%'s band
def test_no_graph_break_under_torch_compile(cls, kwargs):
    """The form switch costs torch.compile nothing: forward and backward trace as one graph. A
    spectral mixer compiled (``aot_eager``: the fast forms' custom ops traced by their fake
    kernels, ``fullgraph``) gives its formula's output and gradients, float64."""
    mixer = build(cls, kwargs).train()
    x = tokens(1, (8, 10)).requires_grad_()
    explanation = torch._dynamo.explain(mixer)(x, (8, 10))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    if not is_spectral(cls):
        return
    mixer, hw = o1_branch(mixer).double(), (7, 12)
    x = tokens(2, hw, dtype=torch.float64).requires_grad_()
    compiled = torch.compile(mixer, backend='aot_eager', fullgraph=True)
    results = []
    for run, form in ((compiled, 'fast'), (mixer, 'reference')):
        with use_form(form):
            out = run(x, hw)
            loss = out.square().sum()
            results.append((out, *torch.autograd.grad(loss, [x, *mixer.parameters()])))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-8)


# SegFormer-B3's stages: (width, heads, ESA reduction).
B3_STAGES = ((64, 1, 8), (128, 2, 4), (320, 5, 2), (512, 8, 1))


@pytest.mark.slow  # 1-6 s a mixer (fp16 kernels on a CPU without native fp16)
@pytest.mark.parametrize('entry', mixer_catalogue(), ids=lambda e: e.name)
def test_float16_autocast_at_b3_stage_widths(entry):
    """What a GPU config's fp16 AmpOptimWrapper runs, on a CPU: every listed mixer at each B3
    stage width on a 4 x 6 grid, forward and backward under ``torch.autocast('cpu',
    float16)``, on float32 tokens (a LayerNorm's output under autocast) and on float16 ones:
    finite, and the output and the input's gradient within 0.3% (relative L2; measured at most
    0.08%, the attention mixers' fp16 matmuls) of float32 on the same tokens. AFNO's spectral
    branch is O(1) (``o1_branch``): dropping it fails. FNO with modes (3, 4): the band (16, 16)
    keeps on a 4 x 6 grid, with a 60th of the weights."""
    hw = (4, 6)
    for channels, heads, sr_ratio in B3_STAGES:
        config = entry.config
        if 'modes' in config:
            config['modes'] = (3, 4)
        torch.manual_seed(0)
        mixer = o1_branch(build_mixer(config, **stage_arguments(
            channels, heads, min(sr_ratio, *hw), hw))).train()
        x = torch.randn(1, hw[0] * hw[1], channels, generator=torch.Generator().manual_seed(1))
        grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
        for token_dtype in (torch.float32, torch.float16):
            results = []
            for autocast in (False, True):  # float32 on the same (rounded) tokens
                inputs = x.to(token_dtype).to(token_dtype if autocast else torch.float32)
                inputs.requires_grad_()
                with torch.autocast('cpu', dtype=torch.float16, enabled=autocast):
                    out = mixer(inputs, hw)
                (grad_x, ) = torch.autograd.grad(out, inputs, grad.to(out.dtype))
                results.append((out.detach(), grad_x))
            (out32, grad32), (out16, grad16) = results
            assert torch.isfinite(out16).all() and torch.isfinite(grad16).all(), channels
            for got, expected in ((out16, out32), (grad16, grad32)):
                assert relative_error(got, expected) < 0.003, (channels, token_dtype,
                                                                relative_error(got, expected))
            assert relative_error(x, out32) > 0.1  # the mixer dropped: this test fails
