"""The export forms of the spectral mixers (:mod:`..forms`): ``op`` and ``matmul``.

ONNX has no complex matmul and ``matmul`` no complex tensor at all, so both compute the formula
on the kept modes as one stacked real tensor ``(B, 2, R, cols, C)`` (:class:`.dft.Stacked`): the
per-mode work (AFNO's block MLP, AFF's mask, FNO's weights, GFN's filter) is real products on it,
between transforms that are ``torch.fft`` (``op``: ONNX's ``DFT`` operator) or :mod:`.dft`'s matmuls
(``matmul``, one implementation for every spectral mixer; FNet's 3-D one: :mod:`.fnet`). A
complex product ``z W`` is the real one ``[zr, zi] [[Wr, Wi], [-Wi, Wr]]``.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..spectral import SpectralBand, irfft2, rfft2
from .dff import dff_matmul
from .dft import Stacked, filter_modes, from_blocks, irfft2_grid, rfft2_grid, to_blocks
from .fnet import fnet_real

__all__ = ['aff_matmul', 'aff_op', 'afno_matmul', 'afno_op', 'dff_matmul', 'fnet_matmul',
           'fno_matmul', 'fno_op', 'gfn_matmul']


def _modes(x: Tensor, hw_shape, band: SpectralBand, matmul: bool, factored=None) -> Stacked:
    if matmul:
        return rfft2_grid(x.reshape(x.shape[0], *hw_shape, x.shape[-1]), band, factored)
    # (B, C, R, cols, part) -> (B, part, R, cols, C)
    return Stacked(torch.view_as_real(rfft2(x, hw_shape, band)).permute(0, 4, 2, 3, 1), None)


def _tokens(spectrum: Stacked, hw_shape, band: SpectralBand, matmul: bool) -> Tensor:
    if matmul:
        return irfft2_grid(spectrum, hw_shape, band).flatten(1, 2)
    real, imag = spectrum.data.permute(1, 0, 4, 2, 3).unbind(0)  # (B, C, R, cols) each
    return irfft2(torch.complex(band.scatter(real), band.scatter(imag)), hw_shape)


def _stacked(real: Tensor, imag: Tensor) -> Tensor:
    """Complex ``(..., p, q)`` as the real ``(..., 2p, 2q)`` that right-multiplies ``[zr, zi]``."""
    return torch.cat([torch.cat([real, imag], -1), torch.cat([-imag, real], -1)], -2)


def _block_mlp(mixer, modes: Tensor, activation, split_shrink: bool = True) -> Tensor:
    """AFNO's (and AFF's) block MLP ``act(z W1 + b1) W2 + b2`` on ``(B, k, M, 2 d)`` blocks (re
    then im), soft-shrunk on re and im apart when ``split_shrink``."""
    w1, b1, w2, b2 = (weight.to(modes.dtype) for weight in mixer.weights())

    def layer(z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:  # (B, k, M, 2 d_in) -> d_out
        return z @ _stacked(weight[0], weight[1]) + bias.transpose(0, 1).flatten(1)[:, None]

    out = layer(activation(layer(modes, w1, b1)), w2, b2)
    threshold = mixer.sparsity_threshold
    # softshrink as x - clamp(x): the same values, two ONNX nodes
    return out - out.clamp(-threshold, threshold) if split_shrink else out


def afno_op(mixer, x: Tensor, hw_shape: tuple[int, int], matmul: bool = False) -> Tensor:
    """AFNO's block MLP on the stacked modes; transforms by ``torch.fft``, or as matmuls."""
    band = mixer.band(hw_shape)
    spectrum = _modes(x, hw_shape, band, matmul)
    out = _block_mlp(mixer, to_blocks(spectrum, mixer.num_blocks), F.relu,
                     split_shrink=mixer.shrink == 'split')
    threshold = mixer.sparsity_threshold
    if mixer.shrink != 'split':  # max(|a| - lambda, 0) a / |a|, the clamp guarding 0/0 only
        real, imag = out.chunk(2, dim=-1)
        magnitude = torch.sqrt(real * real + imag * imag)
        gain = F.relu(magnitude - threshold) / magnitude.clamp_min(1e-30)
        out = out * torch.cat([gain, gain], dim=-1)
    return x + _tokens(from_blocks(out, spectrum), hw_shape, band, matmul)


def aff_op(mixer, x: Tensor, hw_shape: tuple[int, int], matmul: bool = False) -> Tensor:
    """AFF's ``x + irfft2(m * Z)``: the mask ``m`` by the block MLP, its product with the
    modes, on the stacked modes; transforms by ``torch.fft``, or as matmuls."""
    band = SpectralBand.fraction(hw_shape, 1.0)
    spectrum = _modes(x, hw_shape, band, matmul)
    modes = to_blocks(spectrum, mixer.num_blocks)
    mask = _block_mlp(mixer, modes, F.relu if mixer.act == 'relu' else F.silu)
    (mask_real, mask_imag), (real, imag) = mask.chunk(2, dim=-1), modes.chunk(2, dim=-1)
    product = torch.cat([mask_real * real - mask_imag * imag,
                         mask_real * imag + mask_imag * real], dim=-1)
    return x + _tokens(from_blocks(product, spectrum), hw_shape, band, matmul)


def fno_op(mixer, x: Tensor, hw_shape: tuple[int, int], matmul: bool = False) -> Tensor:
    """FNO's per-mode weights on the stacked modes; transforms by ``torch.fft``, or as matmuls."""
    band = mixer.band(hw_shape)
    data = _modes(x, hw_shape, band, matmul, factored=False).data  # (B, 2, R, cols, C)
    batch, _, rows, cols, channels = data.shape
    weight = torch.view_as_real(mixer.weight_at(band, x.dtype))  # (M, C, C, 2)
    z = data.permute(2, 3, 0, 1, 4).reshape(rows * cols, batch, 2 * channels)
    out = z @ _stacked(weight[..., 0], weight[..., 1])  # (M, B, 2C)
    data = out.reshape(rows, cols, batch, 2, channels).permute(2, 3, 0, 1, 4)
    return _tokens(Stacked(data, None), hw_shape, band, matmul)


def gfn_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    band = SpectralBand.fraction(hw_shape, 1.0)
    spectrum = filter_modes(_modes(x, hw_shape, band, True), mixer.kernel(hw_shape, x.dtype))
    return _tokens(spectrum, hw_shape, band, True)


def fnet_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    grid = x.reshape(x.shape[0], *hw_shape, x.shape[-1])
    return fnet_real(grid, mixer.transform).reshape(x.shape)


def aff_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    return aff_op(mixer, x, hw_shape, matmul=True)


def afno_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    return afno_op(mixer, x, hw_shape, matmul=True)


def fno_matmul(mixer, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:
    return fno_op(mixer, x, hw_shape, matmul=True)
