"""Numerical identities of the spectral mixers (AFNO, GFN, FNet, FNO) and their shared helpers.

References are built independently here (numpy DFT matrices, np.interp, complex arithmetic in the
paper's notation); every tolerance is float32 round-off unless stated.
"""
import copy
import math

import numpy as np
import pytest
import torch

from afno_seg.mixers import AFNOMixer, FNetMixer, FNOMixer, GlobalFilterMixer, use_form
from afno_seg.mixers.spectral import SpectralBand, run_in_fp32, signed_frequencies

from mixer_examples import o1_branch, relative_error


def grid_tokens(batch, hw, channels, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, hw[0] * hw[1], channels, generator=generator, dtype=dtype)


def rfft2_grid(tokens, hw):
    """rfft2 of tokens (B, N, C) over the grid, independent of the mixers' helpers."""
    return torch.fft.rfft2(tokens.reshape(tokens.shape[0], *hw, -1), dim=(1, 2), norm='ortho')


def channels_first_modes(hw=(8, 8), channels=16):
    """A channels-first spectrum (B, C, H, W//2+1), the layout ``AFNOMixer.mode_mlp`` takes."""
    return rfft2_grid(grid_tokens(2, hw, channels), hw).permute(0, 3, 1, 2)


def scaled_afno(embed_dims=16, num_blocks=4, std=1.0, seed=0, **kwargs):
    """AFNO with O(1) weights, so its spectral MLP output is far from zero."""
    torch.manual_seed(seed)
    mixer = AFNOMixer(embed_dims, num_blocks=num_blocks, **kwargs)
    with torch.no_grad():
        for param in mixer.parameters():
            param.mul_(std / 0.02)
    return mixer


# ------------------------------------------------------------------------------ shared helpers
@pytest.mark.parametrize('size', [1, 2, 7, 8, 9, 16])
@pytest.mark.parametrize('fraction', [0.25, 0.5, 1.0])
def test_band_keeps_lowest_frequencies_on_both_axes(size, fraction):
    height, width = size, size + 3
    band = SpectralBand.fraction((height, width), fraction)
    max_row = math.ceil(fraction * (height // 2 + 1))
    signed = [i if i <= height // 2 else i - height for i in range(height)]
    expected_rows = [i for i in range(height) if abs(signed[i]) < max_row]
    spectrum = torch.arange(height, dtype=torch.float32).view(1, 1, height, 1).expand(
        2, 3, height, width // 2 + 1)  # (B, C, H, W//2+1), each entry its row index
    kept = band.gather(spectrum)
    assert kept[0, 0, :, 0].tolist() == expected_rows
    assert kept.shape == (2, 3, len(expected_rows), math.ceil(fraction * (width // 2 + 1)))
    # scatter puts kept modes back in place and zeros elsewhere.
    restored = band.scatter(kept)
    mask = torch.zeros(height, width // 2 + 1, dtype=torch.bool)
    mask[expected_rows, :kept.shape[-1]] = True
    assert torch.equal(restored, torch.where(mask, spectrum, 0.))
    if fraction == 1.0:
        assert band.is_full


def test_signed_frequencies():
    assert signed_frequencies(6).tolist() == [0, 1, 2, 3, -2, -1]
    assert signed_frequencies(5).tolist() == [0, 1, 2, -2, -1]


def test_run_in_fp32_disables_autocast_and_restores_dtype():
    seen = {}

    def probe(x):
        seen['dtype'], seen['autocast'] = x.dtype, torch.is_autocast_enabled('cpu')
        return torch.fft.irfft2(torch.fft.rfft2(x), s=x.shape[-2:])

    x = torch.randn(2, 6, 10).bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = run_in_fp32(probe, x)
    assert seen == {'dtype': torch.float32, 'autocast': False}
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, x, atol=1e-2, rtol=1e-2)


# ------------------------------------------------------------------------------ FNet
def dft_matrix(size):
    index = np.arange(size)
    return np.exp(-2j * np.pi * np.outer(index, index) / size) / np.sqrt(size)


@pytest.mark.parametrize('hw', [(7, 9), (8, 8), (4, 6)])
@pytest.mark.parametrize('transform', ['fourier', 'hartley'])
@pytest.mark.parametrize('form', ['fast', 'matmul'])
def test_fnet_equals_explicit_dft(hw, transform, form):
    channels = 6
    x = grid_tokens(2, hw, channels, dtype=torch.float64)
    grid = x.numpy().reshape(2, *hw, channels)
    spectrum = np.einsum('ah,bw,cd,nhwd->nabc', dft_matrix(hw[0]), dft_matrix(hw[1]),
                         dft_matrix(channels), grid)
    expected = spectrum.real if transform == 'fourier' else spectrum.real - spectrum.imag
    mixer = FNetMixer(channels, transform=transform)
    with use_form(form):
        out = mixer(x, hw)
        out32 = mixer(x.float(), hw)
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy().reshape(expected.shape), expected, atol=1e-10)
    np.testing.assert_allclose(out32.numpy().reshape(expected.shape), expected, atol=2e-5)


@pytest.mark.parametrize('transform', ['fourier', 'hartley'])
def test_fnet_paths_agree_and_are_orthonormal(transform):
    hw, channels = (12, 20), 8
    x = grid_tokens(3, hw, channels)
    with use_form('matmul'):
        by_matmul = FNetMixer(channels, transform)(x, hw)
    by_fft = FNetMixer(channels, transform)(x, hw)
    torch.testing.assert_close(by_matmul, by_fft, atol=2e-5, rtol=1e-5)
    if transform == 'hartley':  # the DHT is orthonormal and its own inverse
        torch.testing.assert_close(FNetMixer(channels, transform)(by_fft, hw), x, atol=2e-5,
                                   rtol=1e-5)


# ------------------------------------------------------------------------------ GFN
def numpy_resized_filter(weight, hw, base):
    """Bilinear resize at equal frequency (cycles/pixel), periodic rows, clamped columns."""
    (height, width), (base_height, base_width) = hw, base
    index = np.arange(height)
    signed = np.where(index <= height // 2, index, index - height)
    rows = np.apply_along_axis(
        lambda v: np.interp(signed * base_height / height, np.arange(base_height), v,
                            period=base_height), 0, weight)
    columns = np.minimum(np.arange(width // 2 + 1) * base_width / width, base_width // 2)
    return np.apply_along_axis(
        lambda v: np.interp(columns, np.arange(base_width // 2 + 1), v), 1, rows)


@pytest.mark.parametrize('hw', [(8, 8), (7, 9), (8, 16), (5, 4)])
def test_gfn_all_ones_filter_is_identity(hw):
    mixer = GlobalFilterMixer(6, base_hw_shape=(8, 8))
    with torch.no_grad():
        mixer.complex_weight[..., 0] = 1.0
        mixer.complex_weight[..., 1] = 0.0
    x = grid_tokens(2, hw, 6)
    torch.testing.assert_close(mixer(x, hw), x, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('hw', [(8, 16), (7, 9), (16, 20), (4, 4)])
def test_gfn_at_new_resolution_applies_resized_filter(hw):
    base = (8, 10)
    torch.manual_seed(0)
    mixer = GlobalFilterMixer(4, base_hw_shape=base).double()
    weight = mixer.complex_weight.detach().numpy()
    expected_filter = numpy_resized_filter(weight, hw, base)
    kernel = expected_filter[..., 0] + 1j * expected_filter[..., 1]
    np.testing.assert_allclose(torch.view_as_real(mixer.filter_at(hw)).detach().numpy(),
                               expected_filter, atol=1e-12)
    x = grid_tokens(2, hw, 4, dtype=torch.float64)
    grid = x.numpy().reshape(2, *hw, 4)
    spectrum = np.fft.rfft2(grid, axes=(1, 2), norm='ortho')
    expected = np.fft.irfft2(spectrum * kernel, s=hw, axes=(1, 2), norm='ortho')
    np.testing.assert_allclose(mixer(x, hw).detach().numpy().reshape(expected.shape), expected,
                               atol=1e-12)
    # DC stays DC; doubling a size samples the base filter exactly at even frequencies.
    np.testing.assert_allclose(expected_filter[0, 0], weight[0, 0])
    if hw == (16, 20):
        np.testing.assert_allclose(expected_filter[::2, ::2], weight)


def test_gfn_trained_on_crop_runs_on_whole_image():
    mixer = GlobalFilterMixer(4, base_hw_shape=(8, 8))
    out = mixer(grid_tokens(1, (8, 16), 4), (8, 16))
    assert out.shape == (1, 128, 4) and torch.isfinite(out).all()


# ------------------------------------------------------------------------------ equivariance
def shift_grid(tokens, hw, shifts):
    grid = tokens.reshape(tokens.shape[0], *hw, -1)
    return torch.roll(grid, shifts=shifts, dims=(1, 2)).reshape(tokens.shape)


@pytest.mark.parametrize('build', [
    lambda: GlobalFilterMixer(8, base_hw_shape=(8, 10)),
    lambda: GlobalFilterMixer(8, base_hw_shape=(5, 6)),
    lambda: FNOMixer(8, modes=(3, 4)),
    lambda: FNOMixer(8, modes=(16, 16)),
], ids=['gfn', 'gfn-resized', 'fno-truncated', 'fno-all-modes'])
def test_gfn_and_fno_are_shift_equivariant(build):
    torch.manual_seed(0)
    mixer, hw = build(), (8, 10)
    x = grid_tokens(2, hw, 8)
    for shifts in [(1, 0), (0, 3), (2, -3)]:
        torch.testing.assert_close(mixer(shift_grid(x, hw, shifts), hw),
                                   shift_grid(mixer(x, hw), hw, shifts), atol=1e-5, rtol=1e-5)


def test_afno_is_not_shift_equivariant():
    mixer, hw = scaled_afno(sparsity_threshold=0.0), (8, 10)
    x = grid_tokens(2, hw, 16)
    shifted_out = mixer(shift_grid(x, hw, (2, 3)), hw)
    out_shifted = shift_grid(mixer(x, hw), hw, (2, 3))
    relative = (shifted_out - out_shifted).norm() / out_shifted.norm()
    assert relative > 0.05


# ------------------------------------------------------------------------------ AFNO
@pytest.mark.parametrize('fraction, hw', [(1.0, (8, 8)), (0.5, (7, 9))])
def test_afno_released_layout_and_paper_formula(fraction, hw):
    """Released-layout weights load unchanged; the MLP is ``S(ReLU(z W1 + b1) W2 + b2)`` per
    block and mode (the paper's einsum, written out here) and the fused default equals it."""
    channels, blocks, factor = 16, 4, 2
    d = channels // blocks
    generator = torch.Generator().manual_seed(1)
    state = {
        'w1': torch.randn(2, blocks, d, factor * d, generator=generator),
        'b1': torch.randn(2, blocks, factor * d, generator=generator),
        'w2': torch.randn(2, blocks, factor * d, d, generator=generator),
        'b2': torch.randn(2, blocks, d, generator=generator),
    }
    mixer = AFNOMixer(channels, num_blocks=blocks, hidden_size_factor=factor,
                      sparsity_threshold=0.3, hard_thresholding_fraction=fraction).double()
    mixer.load_state_dict(state, strict=True)
    modes = channels_first_modes(hw, channels).to(torch.complex128)
    w1, b1, w2, b2 = (torch.complex(p[0].double(), p[1].double()) for p in state.values())
    z = modes.permute(0, 2, 3, 1).reshape(*modes.shape[:1], *modes.shape[2:], blocks, d)
    split = lambda f, t: torch.complex(f(t.real), f(t.imag))  # noqa: E731
    o1 = split(torch.relu, torch.einsum('...ki,kio->...ko', z, w1) + b1)
    o2 = split(lambda t: torch.nn.functional.softshrink(t, 0.3),
               torch.einsum('...ki,kio->...ko', o1, w2) + b2)
    torch.testing.assert_close(mixer.mode_mlp(modes), o2.flatten(-2).permute(0, 3, 1, 2))
    x = grid_tokens(2, hw, channels, dtype=torch.float64)
    fused = mixer(x, hw)
    with use_form('reference'):
        torch.testing.assert_close(fused, mixer(x, hw), atol=1e-12, rtol=1e-10)
    with pytest.raises(RuntimeError):
        mixer.load_state_dict({**state, 'w1': state['w1'].transpose(2, 3)})


def test_afno_with_zero_parameters_is_identity():
    mixer = AFNOMixer(16, num_blocks=4, hard_thresholding_fraction=0.5)
    with torch.no_grad():
        for param in mixer.parameters():
            param.zero_()
    x = grid_tokens(2, (7, 9), 16)
    torch.testing.assert_close(mixer(x, (7, 9)), x, atol=0, rtol=0)


@pytest.mark.parametrize('shrink', ['split', 'magnitude'])
def test_soft_shrink_sparsity_rises_with_threshold(shrink):
    mixer = scaled_afno(shrink=shrink)
    modes = channels_first_modes()
    fractions = []
    for threshold in [0.0, 0.5, 2.0, 5.0, 20.0]:
        mixer.sparsity_threshold = threshold
        out = mixer.mode_mlp(modes)
        parts = torch.view_as_real(out) if shrink == 'split' else out.abs()
        fractions.append((parts == 0).float().mean().item())
    assert fractions[0] == 0.0
    assert all(a < b for a, b in zip(fractions, fractions[1:])), fractions
    assert fractions[-1] > 0.5


def test_magnitude_shrink_keeps_phase():
    mixer = scaled_afno(shrink='magnitude', sparsity_threshold=0.0)
    modes = channels_first_modes()
    before = mixer.mode_mlp(modes)
    threshold = before.abs().median().item()
    mixer.sparsity_threshold = threshold
    after = mixer.mode_mlp(modes)
    survivors = before.abs() > threshold
    assert 0.3 < survivors.float().mean() < 0.7
    torch.testing.assert_close(after[survivors].angle(), before[survivors].angle(), atol=1e-5,
                               rtol=0)
    torch.testing.assert_close(after.abs(), (before.abs() - threshold).clamp_min(0), atol=1e-5,
                               rtol=1e-5)
    # The split shrink, by contrast, rotates the phase of the survivors.
    mixer.shrink = 'split'
    split = mixer.mode_mlp(modes)
    both = survivors & (split != 0)
    assert (split[both].angle() - before[both].angle()).abs().max() > 0.1


def test_afno_hard_truncation_removes_high_frequencies():
    hw, fraction = (16, 20), 0.25
    mixer = scaled_afno(sparsity_threshold=0.0, hard_thresholding_fraction=fraction)
    x = grid_tokens(2, hw, 16)
    delta = rfft2_grid(mixer(x, hw) - x, hw).abs()
    rows = signed_frequencies(hw[0]).abs() < math.ceil(fraction * (hw[0] // 2 + 1))
    cols = torch.arange(hw[1] // 2 + 1) < math.ceil(fraction * (hw[1] // 2 + 1))
    kept = rows[:, None] & cols[None, :]
    assert kept.sum() == 5 * 3  # |k| < 3 on 16 rows, j < 3 of 11 columns
    assert delta[:, ~kept].max() < 1e-4
    assert delta[:, kept].min() > 1e-2


def test_afno_truncation_saves_mlp_flops():
    hw = (64, 64)
    full = AFNOMixer(64).flops(hw)
    quarter = AFNOMixer(64, hard_thresholding_fraction=0.25).flops(hw)
    kept = SpectralBand.fraction(hw, 0.25).num_modes / (64 * 33)
    assert quarter['fft'] == full['fft']
    assert quarter['mlp'] == pytest.approx(full['mlp'] * kept)
    assert 0.25 ** 2 * 0.8 < kept < 0.25 ** 2 * 1.25  # ~ fraction kept along each axis
    assert sum(quarter.values()) < sum(full.values())


# ------------------------------------------------------------------------------ FNO
def test_fno_matches_per_mode_reference():
    channels, modes = 4, (3, 2)
    torch.manual_seed(0)
    mixer = FNOMixer(channels, modes=modes).double()
    weight = torch.view_as_complex(mixer.weight.detach())
    for hw in [(8, 10), (3, 3), (4, 1)]:
        x = grid_tokens(2, hw, channels, dtype=torch.float64)
        spectrum = rfft2_grid(x, hw)
        expected = torch.zeros_like(spectrum)
        for row, k in enumerate(signed_frequencies(hw[0]).tolist()):
            for col in range(min(modes[1], hw[1] // 2 + 1)):
                if abs(k) < modes[0]:
                    index = k if k >= 0 else 2 * modes[0] - 1 + k
                    expected[:, row, col] = spectrum[:, row, col] @ weight[index, col]
        expected = torch.fft.irfft2(expected, s=hw, dim=(1, 2), norm='ortho').reshape(x.shape)
        torch.testing.assert_close(mixer(x, hw), expected, atol=1e-12, rtol=1e-10)
    assert sum(p.numel() for p in mixer.parameters()) == 2 * (2 * 3 - 1) * 2 * channels ** 2


# ------------------------------------------------------------------------------ autograd, dtypes
SMALL_MIXERS = [
    lambda: AFNOMixer(8, num_blocks=2, hidden_size_factor=2, sparsity_threshold=0.01),
    lambda: AFNOMixer(8, num_blocks=2, hard_thresholding_fraction=0.5, shrink='magnitude'),
    lambda: GlobalFilterMixer(8, base_hw_shape=(4, 6)),
    lambda: FNOMixer(8, modes=(2, 2)),
    lambda: FNetMixer(8, transform='hartley'),
]
SMALL_IDS = ['afno', 'afno-truncated-magnitude', 'gfn-resized', 'fno', 'fnet-hartley']


@pytest.mark.parametrize('build', SMALL_MIXERS, ids=SMALL_IDS)
def test_gradcheck_in_float64(build):
    torch.manual_seed(0)
    mixer, hw = build().double(), (5, 6)
    with torch.no_grad():  # O(1) weights so ReLU / shrink are not all in one regime
        for param in mixer.parameters():
            param.mul_(20.0)
    x = grid_tokens(1, hw, 8, dtype=torch.float64).requires_grad_()
    params = tuple(mixer.parameters())
    functional = lambda inp, *weights: torch.func.functional_call(  # noqa: E731
        mixer, dict(zip([n for n, _ in mixer.named_parameters()], weights)), (inp, hw))
    assert torch.autograd.gradcheck(functional, (x, *params), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize('build', SMALL_MIXERS, ids=SMALL_IDS)
def test_low_precision_module_runs_spectral_work_in_fp32(build):
    """After ``module.bfloat16()`` (no autocast) the island casts input and weights to fp32:
    only the output's rounding to bf16 remains (2^-9 relative; measured 0.2% L2), within 0.5%.
    AFNO's spectral branch is O(1) of its output (``o1_branch``), so returning the residual
    alone fails (the negative control)."""
    torch.manual_seed(0)
    mixer, hw = o1_branch(build()).bfloat16(), (6, 7)
    x = grid_tokens(2, hw, 8).bfloat16()
    out = mixer(x, hw)
    assert out.dtype == torch.bfloat16
    reference = copy.deepcopy(mixer).float()(x.float(), hw)  # same (bf16-rounded) weights
    assert relative_error(out, reference) < 0.005
    assert relative_error(x, reference) > 0.05


# ------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize('build', [
    lambda: AFNOMixer(10, num_blocks=4),
    lambda: AFNOMixer(16, hard_thresholding_fraction=0.0),
    lambda: AFNOMixer(16, hard_thresholding_fraction=1.5),
    lambda: AFNOMixer(16, shrink='hard'),
    lambda: AFNOMixer(16, sparsity_threshold=-1.0),
    lambda: FNetMixer(16, transform='cosine'),
    lambda: FNOMixer(16, modes=(0, 4)),
    lambda: GlobalFilterMixer(16, base_hw_shape=(0, 8)),
])
def test_bad_arguments_raise(build):
    with pytest.raises(ValueError):
        build()


def test_wrong_token_count_raises():
    with pytest.raises(ValueError, match='tokens of shape'):
        AFNOMixer(16)(torch.randn(1, 10, 16), (3, 4))
