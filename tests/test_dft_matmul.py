"""The DFT as matmuls (afno_seg.mixers.dft_matmul) against torch.fft, in float64."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from afno_seg.mixers import dft_matmul
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
