"""AFF (adaptive frequency filters): the mixer against an independent formula.

The reference is written here in numpy from the paper and the released ``AFNO2D_channelfirst``:
explicit DFT matrices (no FFT), the block MLP per mode in complex arithmetic with the released
channel blocks (channel ``c = block * d + i``), the mask times the spectrum, the inverse real
DFT summing the half spectrum with Hermitian weights, plus the residual. The catalogue suites
(``tests/test_mixer_contract.py``) tie every form to the formula; here each is checked against
this reference, and the hand-written backward of the ``fast`` form against finite differences.
"""
import numpy as np
import pytest
import torch

from afno_seg.mixers import AFFMixer, use_form


def dft(size: int, rows: int, sign: float) -> np.ndarray:
    """``exp(sign 2 pi i r n / size) / sqrt(size)`` for ``r < rows``, ``n < size``."""
    return np.exp(sign * 2j * np.pi * np.outer(np.arange(rows), np.arange(size)) / size) \
        / np.sqrt(size)


def split(fn, z: np.ndarray) -> np.ndarray:
    return fn(z.real) + 1j * fn(z.imag)


ACTS = {'relu': lambda t: np.maximum(t, 0.0), 'silu': lambda t: t / (1.0 + np.exp(-t))}


def numpy_aff(x: np.ndarray, hw, weights, threshold: float, act: str) -> np.ndarray:
    """``x + irfft2(S(act(z W1 + b1) W2 + b2) * Z)`` of tokens ``(B, H*W, C)``, float64."""
    (height, width), (batch, _, channels) = hw, x.shape
    cols = width // 2 + 1
    w1, b1, w2, b2 = (w[0] + 1j * w[1] for w in weights)  # released layout: [real, imag]
    blocks = w1.shape[0]
    grid = x.reshape(batch, height, width, channels)
    spectrum = np.einsum('ah,bw,nhwc->nabc', dft(height, height, -1), dft(width, cols, -1), grid)
    modes = spectrum.reshape(batch, height, cols, blocks, channels // blocks)
    hidden = split(ACTS[act], np.einsum('nhwki,kio->nhwko', modes, w1) + b1)
    out = np.einsum('nhwko,koi->nhwki', hidden, w2) + b2
    mask = split(lambda t: np.sign(t) * np.maximum(np.abs(t) - threshold, 0.0), out)
    product = (mask * modes).reshape(spectrum.shape)
    # The inverse real DFT: column 0 and (even W) the Nyquist column once, the others twice.
    weight = np.full(cols, 2.0)
    weight[0] = 1.0
    if width % 2 == 0:
        weight[-1] = 1.0
    inverse_w = dft(width, cols, 1).T * weight
    mixed = np.einsum('ha,wb,nabc->nhwc', dft(height, height, 1), inverse_w, product).real
    return x + mixed.reshape(x.shape)


def o1_aff(channels=8, num_blocks=2, seed=0, std=0.5, **kwargs) -> AFFMixer:
    """AFF with O(1) weights in float64: its mask is far from zero, ReLU and shrink both cut."""
    torch.manual_seed(seed)
    mixer = AFFMixer(channels, num_blocks=num_blocks, **kwargs).double()
    with torch.no_grad():
        for param in mixer.parameters():
            param.mul_(std / 0.02)
    return mixer


@pytest.mark.parametrize('form', ['fast', 'reference', 'op', 'matmul'])
@pytest.mark.parametrize('hw, act, factor, threshold', [
    ((7, 10), 'relu', 1, 0.01),  # odd height, even width: a Nyquist column
    ((6, 9), 'silu', 2, 0.3),    # odd width; lambda 0.3 cuts a good share of the mask
    ((1, 1), 'relu', 1, 0.01),
])
def test_equals_independent_formula(form, hw, act, factor, threshold):
    mixer = o1_aff(act=act, hidden_size_factor=factor, sparsity_threshold=threshold)
    x = torch.randn(2, hw[0] * hw[1], 8, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1))
    expected = numpy_aff(x.numpy(), hw, [w.detach().numpy() for w in mixer.weights()],
                         threshold, act)
    with use_form(form):
        out = mixer(x, hw)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10, atol=1e-10)
    assert np.abs(expected - x.numpy()).max() > 0.1  # the filter did something
    with use_form(form):  # float32 tokens: float32 arithmetic, float32 round-off
        out32 = mixer.float()(x.float(), hw)
    np.testing.assert_allclose(out32.detach().numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('act', ['relu', 'silu'])
def test_fast_backward_matches_finite_differences(act):
    """The ``fast`` form's op (:mod:`afno_seg.mixers.fast.aff`) and its hand-written backward:
    input and parameter gradients against central differences, float64."""
    mixer = o1_aff(channels=4, num_blocks=2, act=act)
    inputs = [torch.randn(1, 12, 4, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(2)),
              *(w.detach() for w in mixer.weights())]

    def fused(x, *weights):
        return torch.ops.afno_seg.fused_aff(x, *weights, [3, 4], act, 0.05)[0]

    assert torch.autograd.gradcheck(fused, [t.requires_grad_() for t in inputs], eps=1e-6,
                                    atol=1e-7)


def test_unit_mask_scales_and_zero_mask_is_the_residual():
    """``m = S(b2)`` when ``W2 = 0``: a real mask ``a`` gives ``(1 + a) X``; ``|b2| <= lambda``
    gives ``X`` (the released module's own residual, the shrink cutting the whole filter)."""
    mixer, hw = o1_aff(sparsity_threshold=0.1), (5, 6)
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    real_mask, no_mask = (torch.tensor(v, dtype=torch.float64) for v in ([0.85, 0.1], [-0.1, 0.1]))
    for form in ('fast', 'reference', 'matmul'):
        for bias, expected in ((real_mask, 1.75 * x), (no_mask, x)):
            with torch.no_grad():
                mixer.w2.zero_()
                mixer.b2.copy_(bias.view(2, 1, 1).expand_as(mixer.b2))
            with use_form(form):
                torch.testing.assert_close(mixer(x, hw), expected, rtol=1e-12, atol=1e-12)


def test_released_state_dict_loads_unmapped():
    """The released parameters, by name and shape (``hidden_size_factor`` 2 to tell the two
    layers' shapes apart), and nothing else: the activations hold no parameters."""
    channels, blocks, factor = 24, 4, 2
    block = channels // blocks
    released = {'w1': torch.randn(2, blocks, block, block * factor),
                'b1': torch.randn(2, blocks, block * factor),
                'w2': torch.randn(2, blocks, block * factor, block),
                'b2': torch.randn(2, blocks, block)}
    mixer = AFFMixer(channels, num_blocks=blocks, hidden_size_factor=factor)
    mixer.load_state_dict(released, strict=True)
    assert all(torch.equal(mixer.state_dict()[name], value) for name, value in released.items())


@pytest.mark.parametrize('kwargs, message', [
    (dict(embed_dims=20, num_blocks=8), r'embed_dims \(20\) must be divisible by num_blocks \(8\)'),
    (dict(embed_dims=16, num_blocks=0), r'num_blocks \(0\)'),
    (dict(embed_dims=16, act='gelu'), "act must be one of relu, silu, got 'gelu'"),
    (dict(embed_dims=16, sparsity_threshold=-0.1), 'sparsity_threshold must be >= 0, got -0.1'),
    (dict(embed_dims=16, hidden_size_factor=0), 'hidden_size_factor must be >= 1, got 0'),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        AFFMixer(**kwargs)
    assert '\n' not in str(error.value)
