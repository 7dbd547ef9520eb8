"""The DFT as matmuls (afno_seg.mixers.dft_matmul, dft_tokens) against torch.fft, in float64."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from afno_seg.mixers import dft_matmul, dft_tokens
from afno_seg.mixers.spectral import SpectralBand

# (H, W): even and odd, square and not; 16/20/24/25 factor (>= 4 x 4), 9 and 15 do not.
GRIDS = [(16, 16), (15, 9), (25, 16), (16, 25), (24, 20), (9, 15)]
FRACTIONS = [1.0, 0.5, 0.25]


def _complex(pair):
    return torch.complex(*pair)


@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('fraction', FRACTIONS)
@pytest.mark.parametrize('hw', GRIDS, ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_forward_and_inverse_equal_torch_fft(hw, fraction, factored):
    band = SpectralBand.fraction(hw, fraction)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *hw, dtype=torch.float64, generator=generator)
    expected = band.gather(torch.fft.rfft2(x, norm='ortho'))
    modes = dft_matmul.rfft2(x, band, factored=factored)
    assert modes[0].shape == (2, 3, band.n_rows, band.n_cols)
    torch.testing.assert_close(_complex(modes), expected, rtol=0, atol=1e-12)

    # Arbitrary modes (imaginary parts of the DC and Nyquist columns included, which a real
    # signal's spectrum would not have): irfft2 drops them as torch does.
    real, imag = torch.randn(2, *modes[0].shape, dtype=torch.float64, generator=generator)
    expected_grid = torch.fft.irfft2(band.scatter(torch.complex(real, imag)), s=hw, norm='ortho')
    grid = dft_matmul.irfft2(real, imag, hw, band, factored=factored)
    torch.testing.assert_close(grid, expected_grid, rtol=0, atol=1e-12)


def test_full_band_is_the_default_and_round_trip_is_identity():
    x = torch.randn(1, 2, 20, 14, dtype=torch.float64)
    modes = dft_matmul.rfft2(x)
    assert modes[0].shape == (1, 2, 20, 8)
    torch.testing.assert_close(dft_matmul.irfft2(*modes, (20, 14)), x, rtol=0, atol=1e-12)


def test_fft3_equals_fftn():
    x = torch.randn(2, 6, 5, 8, dtype=torch.float64)
    expected = torch.fft.fftn(x, dim=(1, 2, 3), norm='ortho')
    torch.testing.assert_close(_complex(dft_matmul.fft3(x)), expected, rtol=0, atol=1e-12)


def test_dft_mode_switch_is_scoped():
    assert dft_matmul.current_dft_mode() == 'op'
    with dft_matmul.dft_mode('matmul'):
        assert dft_matmul.current_dft_mode() == 'matmul'
        with pytest.raises(ValueError, match='dft mode must be one of'):
            with dft_matmul.dft_mode('fft'):
                pass
        assert dft_matmul.current_dft_mode() == 'matmul'
    assert dft_matmul.current_dft_mode() == 'op'


@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
def test_gradients(factored):
    hw = (16, 20)
    band = SpectralBand.fraction(hw, 0.5)
    x = torch.randn(1, 1, *hw, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: dft_matmul.rfft2(t, band, factored=factored), (x, ))
    real, imag = (torch.randn(1, 1, band.n_rows, band.n_cols, dtype=torch.float64,
                              requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(
        lambda r, i: dft_matmul.irfft2(r, i, hw, band, factored=factored), (real, imag))


def _matmul_macs(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 2


@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
def test_cost_is_what_the_matmuls_do_and_falls_with_the_band(factored):
    hw = (32, 48)
    x = torch.randn(1, 1, *hw)
    costs = {}
    for fraction in (1.0, 0.25):
        band = SpectralBand.fraction(hw, fraction)
        costs[fraction] = dft_matmul.transform_cost(hw, band, factored)
        assert _matmul_macs(lambda: dft_matmul.rfft2(x, band, factored)) == costs[fraction]
    if not factored:  # direct: proportional to the kept modes (9 of 17 rows, 7 of 25 columns)
        assert costs[0.25] < 0.2 * costs[1.0]


def test_factoring_rule():
    assert dft_matmul.split_factor(256) == (16, 16)
    assert dft_matmul.split_factor(96) == (8, 12)
    assert dft_matmul.split_factor(13) is None and dft_matmul.split_factor(18) is None
    assert dft_matmul.use_factored(256, 256, 'h')
    assert dft_matmul.use_factored(128, 128, 'h')
    assert not dft_matmul.use_factored(64, 64, 'h')  # 8 x 8: 64 vs 18 a point, under the gain
    assert not dft_matmul.use_factored(256, 129, 'w')  # W stays direct (measured)
    assert not dft_matmul.use_factored(256, 33, 'h')  # a truncated band is cheaper direct


def test_band_of_another_grid_is_refused():
    band = SpectralBand.fraction((16, 16), 0.5)
    with pytest.raises(ValueError, match='band of a 16x16 grid'):
        dft_matmul.rfft2(torch.zeros(1, 16, 18), band)
    with pytest.raises(ValueError, match='modes of shape'):
        dft_matmul.irfft2(torch.zeros(1, 3, 3), torch.zeros(1, 3, 3), (16, 16), band)


def _natural(spectrum: dft_tokens.Stacked, band: SpectralBand) -> torch.Tensor:
    """A stacked spectrum's modes as complex ``(B, C, rows, cols)`` in the band's order."""
    data = spectrum.data
    if spectrum.factor is not None:  # [k1, part, k2] -> part, k = k1 + n1 k2
        data = data.permute(0, 2, 3, 1, 4, 5).flatten(2, 3)
    if spectrum.w_factor is not None:  # columns [k1, k2] -> k, then the band's first cols
        n1 = spectrum.w_factor[0]
        data = data.unflatten(3, (n1, -1)).transpose(3, 4).flatten(3, 4)[..., :band.n_cols, :]
    return torch.complex(data[:, 0], data[:, 1]).permute(0, 3, 1, 2)


# 24 x 20 factors as 4 x 6 and 4 x 5, 15 x 9 does not (direct either way)
@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('fraction', [1.0, 0.25])
@pytest.mark.parametrize('hw', [(24, 20), (15, 9)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_tokens_layout_equals_torch_fft(hw, fraction, factored):
    """Channels-last stacked transforms: forward, inverse of arbitrary modes (the W columns past
    the band and the imaginary parts torch drops included), AFNO's block view, GFN's filter."""
    band = SpectralBand.fraction(hw, fraction)
    generator = torch.Generator().manual_seed(0)
    grid = torch.randn(2, *hw, 4, dtype=torch.float64, generator=generator)
    spectrum = dft_tokens.rfft2_grid(grid, band, factored)
    assert (spectrum.factor is not None) == (factored and fraction == 1.0 and hw == (24, 20))
    expected = band.gather(torch.fft.rfft2(grid.permute(0, 3, 1, 2), norm='ortho'))
    torch.testing.assert_close(_natural(spectrum, band), expected, rtol=0, atol=1e-12)

    modes = dft_tokens.Stacked(torch.randn(spectrum.data.shape, dtype=torch.float64,
                                           generator=generator), spectrum.factor, spectrum.w_factor)
    expected_grid = torch.fft.irfft2(band.scatter(_natural(modes, band)), s=hw, norm='ortho')
    torch.testing.assert_close(dft_tokens.irfft2_grid(modes, hw, band),
                               expected_grid.permute(0, 2, 3, 1), rtol=0, atol=1e-12)
    blocks = dft_tokens.to_blocks(modes, 2)
    assert blocks.shape == (2, 2, modes.data[0].numel() // 8, 4)  # (B, k, modes, 2 d)
    assert torch.equal(dft_tokens.from_blocks(blocks, modes).data, modes.data)
    if fraction == 1.0:
        kernel = torch.randn(4, *expected.shape[2:], dtype=torch.complex128, generator=generator)
        filtered = dft_tokens.filter_modes(spectrum, kernel)
        torch.testing.assert_close(_natural(filtered, band), expected * kernel, rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize('layout', ['last', 'first'])
@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('transform', ['fourier', 'hartley'])
def test_fnet_real_part_equals_fftn(transform, factored, layout):
    grid = torch.randn(2, 20, 16, 24, dtype=torch.float64)  # H 4 x 5, W 4 x 4, C 4 x 6
    spectrum = torch.fft.fftn(grid, dim=(1, 2, 3), norm='ortho')
    expected = spectrum.real - spectrum.imag if transform == 'hartley' else spectrum.real
    torch.testing.assert_close(dft_tokens.fnet_real(grid, transform, factored, layout), expected,
                               rtol=0, atol=1e-12)


def test_tokens_factoring_rule():
    assert dft_tokens.use_factored(32, 'h') and dft_tokens.use_factored(256, 'w')
    assert not dft_tokens.use_factored(16, 'h') and not dft_tokens.use_factored(128, 'w')
    assert not dft_tokens.use_factored(67, 'h')  # prime
    band = SpectralBand.fraction((64, 256), 1.0)
    spectrum = dft_tokens.rfft2_grid(torch.zeros(1, 64, 256, 1), band)
    assert spectrum.factor == (8, 8) and spectrum.w_factor == (16, 16)
    truncated = SpectralBand.fraction((64, 256), 0.25)
    spectrum = dft_tokens.rfft2_grid(torch.zeros(1, 64, 256, 1), truncated)
    assert spectrum.factor is None and spectrum.w_factor is None
    # FNet: small C on a large grid keeps the tokens' layout, wide C goes channels-first
    assert dft_tokens._fnet_plan((1, 256, 256, 64), None)[0] == 'last'
    assert dft_tokens._fnet_plan((1, 32, 32, 512), None)[0] == 'first'
