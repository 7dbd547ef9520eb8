"""PoolFormer pooling mixer: equal to a direct window sum over valid tokens minus the token, and to
the released formula (``nn.AvgPool2d(count_include_pad=False)(x) - x``), on grids smaller than the
window, odd and non-square; the two one-line variants (padding counted, no ``- x``) differ from
it; gradients; bad pool sizes refused."""
import pytest
import torch
from torch import nn

from afno_seg.mixers.pooling import PoolingMixer

EMBED_DIMS = 5
# (grid, pool size): square, non-square odd, a window wider than the grid, a single token.
CASES = [((6, 6), 3), ((7, 12), 3), ((5, 9), 5), ((3, 4), 7), ((1, 1), 3), ((2, 9), 9)]


def tokens(hw_shape, batch=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, hw_shape[0] * hw_shape[1], EMBED_DIMS, generator=generator,
                       dtype=torch.float64)


def window_sum_reference(x, hw_shape, pool_size):
    """Per token: the mean of the tokens of its window that lie on the grid, minus the token."""
    height, width = hw_shape
    grid = x.reshape(x.shape[0], height, width, x.shape[-1])
    out = torch.empty_like(grid)
    half = pool_size // 2
    for i in range(height):
        for j in range(width):
            window = grid[:, max(i - half, 0):i + half + 1, max(j - half, 0):j + half + 1]
            out[:, i, j] = window.sum(dim=(1, 2)) / (window.shape[1] * window.shape[2])
    return (out - grid).reshape(x.shape)


def released_formula(x, hw_shape, pool_size, count_include_pad=False):
    grid = x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw_shape)
    pool = nn.AvgPool2d(pool_size, stride=1, padding=pool_size // 2,
                        count_include_pad=count_include_pad)
    return (pool(grid) - grid).flatten(2).transpose(1, 2)


@pytest.mark.parametrize('hw_shape,pool_size', CASES,
                         ids=[f'{g[0]}x{g[1]}-k{k}' for g, k in CASES])
def test_equals_window_sum_and_released_formula(hw_shape, pool_size):
    mixer = PoolingMixer(EMBED_DIMS, pool_size=pool_size)
    x = tokens(hw_shape)
    out = mixer(x, hw_shape)
    reference = window_sum_reference(x, hw_shape, pool_size)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, released_formula(x, hw_shape, pool_size),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('hw_shape,pool_size', CASES,
                         ids=[f'{g[0]}x{g[1]}-k{k}' for g, k in CASES])
def test_compiled_form_is_the_same_average(hw_shape, pool_size, monkeypatch):
    """Under torch.compile the mixer takes its shifted-sum form: the same output and gradient."""
    mixer = PoolingMixer(EMBED_DIMS, pool_size=pool_size)
    x = tokens(hw_shape).requires_grad_()
    grad = tokens(hw_shape, seed=1)
    out = mixer(x, hw_shape)
    expected = (out, *torch.autograd.grad(out, x, grad))
    monkeypatch.setattr(torch.compiler, 'is_compiling', lambda: True)
    out = mixer(x, hw_shape)
    torch.testing.assert_close(out, window_sum_reference(x.detach(), hw_shape, pool_size),
                               rtol=1e-12, atol=1e-12)
    for actual, reference in zip((out, *torch.autograd.grad(out, x, grad)), expected):
        torch.testing.assert_close(actual, reference, rtol=1e-12, atol=1e-12)


def test_one_line_variants_differ_from_the_reference():
    """What the equality above rules out: counting the zero padding in the border average, and
    returning the average without ``- x``."""
    hw_shape, pool_size = (5, 7), 3
    x = tokens(hw_shape)
    reference = window_sum_reference(x, hw_shape, pool_size)
    with_padding = released_formula(x, hw_shape, pool_size, count_include_pad=True)
    no_subtraction = reference + x
    for wrong in (with_padding, no_subtraction):
        assert (wrong - reference).abs().max() > 0.05
    # Counting the padding changes the border tokens only.
    inner = (with_padding - reference).reshape(2, *hw_shape, EMBED_DIMS)[:, 1:-1, 1:-1]
    assert inner.abs().max() < 1e-12


def test_gradient_is_the_adjoint_of_the_window_average():
    """The input gradient equals the one of the explicit window sum (each token receives
    ``1 / |window|`` from every window containing it, minus its own output gradient)."""
    hw_shape, pool_size = (4, 7), 5
    mixer = PoolingMixer(EMBED_DIMS, pool_size=pool_size)
    x = tokens(hw_shape).requires_grad_()
    grad = tokens(hw_shape, seed=1)
    (got, ) = torch.autograd.grad(mixer(x, hw_shape), x, grad)
    (want, ) = torch.autograd.grad(window_sum_reference(x, hw_shape, pool_size), x, grad)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_no_parameters_and_flops():
    mixer = PoolingMixer(EMBED_DIMS, pool_size=5)
    assert not list(mixer.parameters()) and not mixer.state_dict()
    assert mixer.flops((3, 4)) == {'pool': 25.0 * EMBED_DIMS * 12}


@pytest.mark.parametrize('pool_size', [4, 0, -3, 2.0, True])
def test_bad_pool_size_is_refused(pool_size):
    with pytest.raises(ValueError, match=rf'pool_size must be an odd positive integer .*, got '
                                         rf'{pool_size!r}'):
        PoolingMixer(EMBED_DIMS, pool_size=pool_size)
