"""One contract suite over every token mixer in the catalogue (``afno_seg.mixers.catalogue``).

The cases are each registered mixer's ``example_args`` and ``extra_examples``
(``mixer_examples.example_cases``), so a new mixer module is covered as soon as it is imported,
with nothing edited here (``docs/adding_a_mixer.md``).
"""
import numbers

import pytest
import torch

from afno_seg.backbones.stage import build_mixer, stage_arguments
from afno_seg.mixers import is_spectral, mixer_catalogue, registered_mixers, stores_grid
from afno_seg.mixers.catalogue import declared
from afno_seg.registry import MMPRETRAIN_MODELS, MMSEG_MODELS

from mixer_examples import EXAMPLE_EMBED_DIMS, example_cases

EMBED_DIMS = EXAMPLE_EMBED_DIMS
GRIDS = [(8, 8), (7, 12)]  # square; non-square with an odd side
CASES_ALL = [pytest.param(cls, kwargs, id=case_id) for case_id, cls, kwargs in example_cases()]


def test_catalogue_lists_the_projects_mixers():
    names = set(registered_mixers())
    assert {'AFNOMixer', 'GlobalFilterMixer', 'FNetMixer', 'FNOMixer', 'AxialAttentionMixer',
            'EfficientSelfAttentionMixer', 'FullSelfAttentionMixer'} <= names
    variants = {entry.name: entry for entry in mixer_catalogue(include_unlisted=True)}
    assert {'afno', 'afno25', 'gfn', 'fnet', 'fno', 'esa', 'sa', 'axial'} <= set(variants)
    assert not variants['afno-composed'].listed and variants['afno25'].listed
    # Each declares its own variants: FullSelfAttentionMixer derives from ESA but is 'sa' only.
    assert [e.name for e in variants.values() if e.cls.__name__ == 'FullSelfAttentionMixer'] \
        == ['sa']


def test_spectral_and_stores_grid_are_derived():
    """``is_spectral``: an 'fft' FLOP term; ``stores_grid``: a ``base_hw_shape`` argument."""
    by_name = {cls.__name__: cls for cls in MMSEG_MODELS.module_dict.values()}
    spectral = {name for name in registered_mixers() if is_spectral(by_name[name])}
    assert {'AFNOMixer', 'GlobalFilterMixer', 'FNetMixer', 'FNOMixer'} <= spectral
    assert not spectral & {'EfficientSelfAttentionMixer', 'AxialAttentionMixer'}
    assert [name for name in registered_mixers() if stores_grid(by_name[name])] == \
        ['GlobalFilterMixer']


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

    * bf16 input -> bf16 output, within 3% relative L2 of the fp32 output on the same
      (bf16-rounded) input: bf16 keeps 8 mantissa bits (2^-8 ~ 0.4% per rounding), and attention
      mixers run their matmuls in bf16.
    * fp32 input under autocast: the spectral mixers (fp32 islands) return fp32 exactly; mixers
      whose last op is an autocast-listed matmul (the attention mixers) may return bf16, as
      ``nn.Linear`` does under autocast; either way within the same 3%.
    """
    hw = (12, 20)
    mixer = build(cls, kwargs)
    x = tokens(2, hw)
    x_bf16 = x.bfloat16()
    with torch.no_grad():
        reference = mixer(x_bf16.float(), hw)
        reference_fp32 = mixer(x, hw)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out_bf16 = mixer(x_bf16, hw)
            out_fp32_input = mixer(x, hw)
    assert out_bf16.dtype == torch.bfloat16
    if is_spectral(cls):
        assert out_fp32_input.dtype == torch.float32
    else:
        assert out_fp32_input.dtype in (torch.float32, torch.bfloat16)
    for out, ref in [(out_bf16, reference), (out_fp32_input, reference_fp32)]:
        assert torch.isfinite(out).all()
        relative = (out.float() - ref).norm() / ref.norm()
        assert relative < 0.03, f'relative L2 error {relative:.4f}'


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
