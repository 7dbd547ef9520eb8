"""Spectral analysis: AFNO sparsity against a direct count, radial energy against Parseval,
receptive fields against the reach of a local mixer."""
import pytest
import torch
import torch.nn.functional as F

import afno_seg  # noqa: F401  (registers the mixers)
from afno_seg.backbones.mixer_mit import MixerMiT
from afno_seg.experiments.receptive_field import effective_receptive_fields, erf_radius
from afno_seg.experiments.spectrum import (
    MixerProbe,
    afno_shrink_stats,
    gfn_filters,
    radial_band_index,
    radial_energy,
)
from afno_seg.mixers.afno import AFNOMixer
from afno_seg.mixers.base import TokenMixer


def tiny_backbone(mixers, num_layers=(1, 1), embed_dims=8, num_heads=(1, 2)) -> MixerMiT:
    stages = len(num_layers)
    torch.manual_seed(0)
    model = MixerMiT(embed_dims=embed_dims, num_stages=stages, num_layers=list(num_layers),
                     num_heads=list(num_heads), patch_sizes=[7, 3][:stages],
                     strides=[4, 2][:stages], sr_ratios=[2, 1][:stages],
                     out_indices=tuple(range(stages)), mixers=mixers, base_img_size=64)
    model.init_weights()
    return model.eval()


def direct_afno_output(mixer: AFNOMixer, x: torch.Tensor, hw_shape) -> torch.Tensor:
    """The block MLP before the shrink, written out from the paper (float64, full spectrum):
    per block ``o1 = ReLU(z W1 + b1)`` (split), ``o2 = o1 W2 + b2``; returns ``o2`` stacked as
    (re, im) over (B, k, d, H, W//2+1)."""
    batch, _, channels = x.shape
    k, d = mixer.num_blocks, mixer.block_size
    grid = x.double().reshape(batch, *hw_shape, channels).permute(0, 3, 1, 2)
    z = torch.fft.rfft2(grid, norm='ortho').reshape(batch, k, d, hw_shape[0], -1)

    def cplx(p):
        return torch.complex(p[0].double(), p[1].double())

    o1 = torch.einsum('bkdhw,kdf->bkfhw', z, cplx(mixer.w1)) + cplx(mixer.b1)[None, :, :, None,
                                                                              None]
    o1 = torch.complex(o1.real.relu(), o1.imag.relu())
    o2 = torch.einsum('bkfhw,kfd->bkdhw', o1, cplx(mixer.w2)) + cplx(mixer.b2)[None, :, :, None,
                                                                               None]
    return torch.stack([o2.real, o2.imag])


def separated_threshold(values: torch.Tensor) -> float:
    """A threshold near the median of ``|values|`` in the widest gap around it, so float32 and
    float64 arithmetic cannot put an element on different sides of it."""
    ordered = values.abs().flatten().sort().values
    middle = ordered.numel() // 2
    window = ordered[middle - 50:middle + 50]
    gap = int(torch.argmax(window[1:] - window[:-1]))
    return float((window[gap] + window[gap + 1]).detach() / 2)


def capture_inputs(model, mixers, inputs) -> dict:
    """Each mixer's input tokens and grid in one forward pass of ``model``."""
    captured = {}

    def hook(module, args, output) -> None:
        captured[id(module)] = (args[0].detach(), tuple(args[1]))

    handles = [m.register_forward_hook(hook) for m in mixers]
    with torch.no_grad():
        model(inputs)
    for handle in handles:
        handle.remove()
    return captured


def test_afno_sparsity_equals_direct_count():
    model = tiny_backbone(dict(type='AFNOMixer', num_blocks=2, sparsity_threshold=0.0))
    inputs = torch.randn(2, 3, 64, 96)
    mixers = [m for m in model.modules() if isinstance(m, AFNOMixer)]
    for mixer, (x, hw) in zip(mixers, capture_inputs(model, mixers, inputs).values()):
        mixer.sparsity_threshold = separated_threshold(direct_afno_output(mixer, x, hw))
    probe = MixerProbe(model, num_bands=4)
    with probe:
        captured = capture_inputs(model, mixers, inputs)  # the inputs the probe saw
    layers = probe.results()['afno']['layers']
    assert len(layers) == len(mixers) == 2
    for entry, mixer in zip(layers, mixers):
        pre = direct_afno_output(mixer, *captured[id(mixer)])
        direct = float((pre.abs() <= mixer.sparsity_threshold).double().mean())
        assert entry['threshold'] == mixer.sparsity_threshold
        assert entry['sparsity'] == pytest.approx(direct, abs=1e-12)
        assert 0.2 < entry['sparsity'] < 0.8  # the threshold sits near the median
        # the bands partition the coefficients
        stats = afno_shrink_stats(mixer, *captured[id(mixer)], num_bands=4)
        assert sum(stats['band_zeros']) == stats['zeros']
        assert sum(stats['band_total']) == stats['total']


def test_afno_sparsity_of_a_truncated_mixer_counts_only_kept_modes():
    torch.manual_seed(1)
    mixer = AFNOMixer(16, num_blocks=4, sparsity_threshold=0.0, hard_thresholding_fraction=0.5)
    x = torch.randn(1, 12 * 10, 16)
    stats = afno_shrink_stats(mixer, x, (12, 10), num_bands=4, output=mixer(x, (12, 10)))
    # rows |k| < ceil(0.5 * 7) = 4 (7 rows), columns < ceil(0.5 * 6) = 3: 21 modes x 16 ch x 2
    assert stats['total'] == 21 * 16 * 2
    assert stats['zeros'] == 0  # lambda = 0 zeroes nothing


def test_afno_check_rejects_an_output_the_mixer_did_not_produce():
    torch.manual_seed(2)
    mixer = AFNOMixer(8, num_blocks=2, sparsity_threshold=0.01)
    x = torch.randn(1, 36, 8)
    afno_shrink_stats(mixer, x, (6, 6), 4, output=mixer(x, (6, 6)))
    with pytest.raises(RuntimeError, match='does not reproduce the mixer output'):
        afno_shrink_stats(mixer, x, (6, 6), 4, output=mixer(x, (6, 6)) + 0.1)


def test_radial_energy_sums_to_the_token_energy():
    """Parseval (orthonormal FFT): power per mode x modes per band, summed, is sum |x|^2."""
    torch.manual_seed(3)
    for hw in [(8, 8), (7, 10)]:
        x = torch.randn(2, hw[0] * hw[1], 5)
        bands = radial_band_index(hw, 6)
        weight = torch.full((hw[1] // 2 + 1, ), 2.0, dtype=torch.float64)
        weight[0] = 1
        if hw[1] % 2 == 0:
            weight[-1] = 1
        modes = torch.zeros(6, dtype=torch.float64).index_add_(
            0, bands.flatten(), weight.expand(hw[0], -1).flatten())
        total = (radial_energy(x, hw, 6) * modes * 2 * 5).nansum()  # NaN: bands without modes
        assert float(total) == pytest.approx(float((x.double() ** 2).sum()), rel=1e-10)


def test_gfn_filters_resample_to_the_requested_grid():
    model = tiny_backbone(dict(type='GlobalFilterMixer'))
    filters = gfn_filters(model, resample_factor=2.0, num_bands=4)
    assert [f['stage'] for f in filters] == [1, 2]
    first = filters[0]
    assert first['base_grid'] == [16, 16] and first['resampled_grid'] == [32, 32]
    assert tuple(first['stored'].shape) == (16, 9, 8)
    assert tuple(first['resampled'].shape) == (32, 17, 8)
    mixer = model.layers[0][1][0].attn
    torch.testing.assert_close(first['stored'], mixer.complex_weight.detach().norm(dim=-1))


class LocalMixer(TokenMixer):
    """A mixer that only mixes a 3 x 3 neighbourhood of tokens (depth-wise convolution)."""

    def __init__(self, embed_dims: int, init_cfg=None) -> None:
        super().__init__(embed_dims, init_cfg=init_cfg)
        self.weight = torch.nn.Parameter(torch.randn(embed_dims, 1, 3, 3))

    def forward(self, x, hw_shape):
        grid = x.transpose(1, 2).reshape(x.shape[0], -1, *hw_shape)
        out = F.conv2d(grid, self.weight, padding=1, groups=self.embed_dims)
        return out.flatten(2).transpose(1, 2)


def with_random_stage_norms(model: MixerMiT) -> MixerMiT:
    """A stage ends in a LayerNorm; with its initial weight 1 and bias 0 the channel sum of its
    output is 0 whatever the input, so the ERF of that sum would be rounding noise (exactly 0 on
    some CPUs). Random affine weights make the probed unit depend on the input."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.weight.data = torch.rand(module.weight.shape, generator=generator) + 0.5
    return model


def test_receptive_field_of_a_local_mixer_is_zero_outside_its_reach():
    model = with_random_stage_norms(
        tiny_backbone(dict(type=LocalMixer), num_layers=(2, ), num_heads=(1, )))
    images = [torch.randn(1, 3, 64, 64) for _ in range(2)]
    erf = effective_receptive_fields(model, images, ['stage1'], [0])['stage1']
    # centre token 8 of 16; per layer the mixer and Mix-FFN's 3x3 depth-wise conv reach 1 token
    # each: tokens 4..12; token j of the 7x7 / stride 4 / pad 3 embedding sees pixels 4j-3..4j+3
    low, high = 4 * 4 - 3, 4 * 12 + 3
    inside = torch.zeros(64, 64, dtype=torch.bool)
    inside[low:high + 1, low:high + 1] = True
    assert float(erf[~inside].abs().max()) == 0.0
    assert float(erf[inside].min()) >= 0 and float(erf[32, 32]) > 0
    assert erf[inside].gt(0).float().mean() > 0.5
    assert erf_radius(erf, 0.9) < (high - low) / 2 * 1.5
    # a global mixer reaches the corners
    global_model = with_random_stage_norms(
        tiny_backbone(dict(type='AFNOMixer', num_blocks=2, sparsity_threshold=0.0),
                      num_layers=(2, ), num_heads=(1, )))
    far = effective_receptive_fields(global_model, images, ['stage1'], [0])['stage1']
    assert float(far[~inside].max()) > 0


def test_probe_leaves_the_model_output_unchanged_and_removes_its_hooks():
    model = tiny_backbone(dict(type='AFNOMixer', num_blocks=2))
    inputs = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        reference = model(inputs)
        with MixerProbe(model) as probe:
            outputs = model(inputs)
            assert all(m._forward_hooks for m in model.modules() if isinstance(m, AFNOMixer))
    assert not probe.handles
    assert not any(m._forward_hooks for m in model.modules() if isinstance(m, AFNOMixer))
    for a, b in zip(reference, outputs):
        assert torch.equal(a, b)
