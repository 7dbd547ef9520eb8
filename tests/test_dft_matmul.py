"""The DFT as matmuls (the export forms' transforms, afno_seg.mixers.export) against torch.fft,
in float64."""
import pytest
import torch

from afno_seg.mixers.export import dft, fnet
from afno_seg.mixers.spectral import SpectralBand


def test_split_factor():
    assert dft.split_factor(256) == (16, 16)
    assert dft.split_factor(96) == (8, 12)
    assert dft.split_factor(13) is None and dft.split_factor(18) is None


def _natural(spectrum: dft.Stacked, band: SpectralBand) -> torch.Tensor:
    """A stacked spectrum's modes as complex ``(B, C, rows, cols)`` in the band's order."""
    data = spectrum.data
    if spectrum.factor is not None:  # [k1, part, k2] -> part, k = k1 + n1 k2
        data = data.permute(0, 2, 3, 1, 4, 5).flatten(2, 3)
    if spectrum.w_factor is not None:  # columns [k1, k2] -> k, then the band's first cols
        n1 = spectrum.w_factor[0]
        data = data.unflatten(3, (n1, -1)).transpose(3, 4).flatten(3, 4)[..., :band.n_cols, :]
    return torch.complex(data[:, 0], data[:, 1]).permute(0, 3, 1, 2)


# 24 x 20 factors as 4 x 6 and 4 x 5, 15 x 9 does not (direct either way), 16 x 25 as 4 x 4 and
# 5 x 5 (odd W)
@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('fraction', [1.0, 0.5, 0.25])
@pytest.mark.parametrize('hw', [(24, 20), (15, 9), (16, 25)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_tokens_layout_equals_torch_fft(hw, fraction, factored):
    """Channels-last stacked transforms: forward, inverse of arbitrary modes (the W columns past
    the band and the imaginary parts torch drops included), AFNO's block view, GFN's filter."""
    band = SpectralBand.fraction(hw, fraction)
    generator = torch.Generator().manual_seed(0)
    grid = torch.randn(2, *hw, 4, dtype=torch.float64, generator=generator)
    spectrum = dft.rfft2_grid(grid, band, factored)
    assert (spectrum.factor is not None) == (factored and fraction == 1.0 and hw != (15, 9))
    expected = band.gather(torch.fft.rfft2(grid.permute(0, 3, 1, 2), norm='ortho'))
    torch.testing.assert_close(_natural(spectrum, band), expected, rtol=0, atol=1e-12)

    modes = dft.Stacked(torch.randn(spectrum.data.shape, dtype=torch.float64,
                                           generator=generator), spectrum.factor, spectrum.w_factor)
    expected_grid = torch.fft.irfft2(band.scatter(_natural(modes, band)), s=hw, norm='ortho')
    torch.testing.assert_close(dft.irfft2_grid(modes, hw, band),
                               expected_grid.permute(0, 2, 3, 1), rtol=0, atol=1e-12)
    blocks = dft.to_blocks(modes, 2)
    assert blocks.shape == (2, 2, modes.data[0].numel() // 8, 4)  # (B, k, modes, 2 d)
    assert torch.equal(dft.from_blocks(blocks, modes).data, modes.data)
    if fraction == 1.0:
        kernel = torch.randn(4, *expected.shape[2:], dtype=torch.complex128, generator=generator)
        filtered = dft.filter_modes(spectrum, kernel)
        torch.testing.assert_close(_natural(filtered, band), expected * kernel, rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize('layout', ['last', 'first'])
@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('transform', ['fourier', 'hartley'])
def test_fnet_real_part_equals_fftn(transform, factored, layout):
    grid = torch.randn(2, 20, 16, 24, dtype=torch.float64)  # H 4 x 5, W 4 x 4, C 4 x 6
    spectrum = torch.fft.fftn(grid, dim=(1, 2, 3), norm='ortho')
    expected = spectrum.real - spectrum.imag if transform == 'hartley' else spectrum.real
    torch.testing.assert_close(fnet.fnet_real(grid, transform, factored, layout), expected,
                               rtol=0, atol=1e-12)


def test_tokens_factoring_rule():
    assert dft.use_factored(32, 'h') and dft.use_factored(256, 'w')
    assert not dft.use_factored(16, 'h') and not dft.use_factored(128, 'w')
    assert not dft.use_factored(67, 'h')  # prime
    band = SpectralBand.fraction((64, 256), 1.0)
    spectrum = dft.rfft2_grid(torch.zeros(1, 64, 256, 1), band)
    assert spectrum.factor == (8, 8) and spectrum.w_factor == (16, 16)
    truncated = SpectralBand.fraction((64, 256), 0.25)
    spectrum = dft.rfft2_grid(torch.zeros(1, 64, 256, 1), truncated)
    assert spectrum.factor is None and spectrum.w_factor is None
    # FNet: small C on a large grid keeps the tokens' layout, wide C goes channels-first
    assert fnet._fnet_plan((1, 256, 256, 64), None)[0] == 'last'
    assert fnet._fnet_plan((1, 32, 32, 512), None)[0] == 'first'


@pytest.mark.parametrize('factored', [False, True], ids=['direct', 'factored'])
@pytest.mark.parametrize('fraction', [1.0, 0.5])
def test_gradients(fraction, factored):
    """Plain autograd through the constant matrices: the export forms are differentiable."""
    hw = (16, 20)
    band = SpectralBand.fraction(hw, fraction)
    grid = torch.randn(1, *hw, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: dft.rfft2_grid(t, band, factored).data, (grid, ),
                                    fast_mode=True)
    like = dft.rfft2_grid(grid.detach(), band, factored)
    modes = torch.randn(like.data.shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda m: dft.irfft2_grid(
        dft.Stacked(m, like.factor, like.w_factor), hw, band), (modes, ), fast_mode=True)
