"""Long-Short attention mixer: equality to a dense float64 reference (the full N x N attention with
the exact window mask plus the long keys), the reach of the short branch, gradients, autocast,
analytic FLOPs == traced, linear cost, and a tiny MixerMiT built with it."""
import math

import pytest
import torch

from afno_seg.analysis import count_mixer_flops
from afno_seg.analysis.flops import NORM_OPS
from afno_seg.backbones.mixer_mit import MixerMiT
from afno_seg.mixers.attention import FullSelfAttentionMixer
from afno_seg.mixers.long_short import LongShortAttentionMixer

EMBED_DIMS = 16


def tokens(hw_shape, batch=2, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, hw_shape[0] * hw_shape[1], EMBED_DIMS, generator=generator,
                       dtype=dtype)


def build(seed=0, perturb=True, **kwargs):
    """A mixer in eval mode; ``perturb`` moves every parameter (norm affines included) off its
    initial value, so that swapped or skipped norms change the output."""
    torch.manual_seed(seed)
    mixer = LongShortAttentionMixer(EMBED_DIMS, **kwargs).eval()
    if perturb:
        with torch.no_grad():
            for param in mixer.parameters():
                param.add_(0.3 * torch.randn_like(param))
    return mixer


def dense_reference(mixer, x, hw_shape):
    """The definition written out over all N keys: masked N x N short logits + r long logits."""
    height, width = hw_shape
    batch, num_tokens, channels = x.shape
    heads, landmarks, win = mixer.num_heads, mixer.num_landmarks, mixer.window_size
    dims, halo = channels // heads, win // 2
    qkv = x @ mixer.qkv.weight.T + (0 if mixer.qkv.bias is None else mixer.qkv.bias)
    query, key, value = (t.reshape(batch, num_tokens, heads, dims).transpose(1, 2)
                         for t in qkv.chunk(3, dim=-1))
    projection = (x @ mixer.dynamic_proj.weight.T).reshape(batch, num_tokens, heads, landmarks)
    projection = projection.softmax(dim=1).permute(0, 2, 3, 1)  # P^T: (B, heads, r, N)
    long_key = mixer.norm_long_key(projection @ key)
    long_value = mixer.norm_long_value(projection @ value)
    row, col = torch.arange(num_tokens) // width, torch.arange(num_tokens) % width

    def near(position):  # key within half a window of the query's window, along one axis
        start = position // win * win
        return ((position[None, :] >= start[:, None] - halo)
                & (position[None, :] < start[:, None] + win + halo))

    allowed = torch.cat([near(row) & near(col),
                         torch.ones(num_tokens, landmarks, dtype=torch.bool)], dim=1)
    keys = torch.cat([mixer.norm_short_key(key), long_key], dim=2)
    values = torch.cat([mixer.norm_short_value(value), long_value], dim=2)
    logits = query @ keys.transpose(-1, -2) / math.sqrt(dims)
    weights = logits.masked_fill(~allowed, float('-inf')).softmax(dim=-1)
    out = (weights @ values).transpose(1, 2).reshape(batch, num_tokens, channels)
    return mixer.proj(out)


# (grid, window, landmarks, heads): square, non-square, odd, windows not dividing the grid,
# a window larger than the grid, w = 1 (no halo), odd w (halo floor(w/2)).
DENSE_CASES = [((8, 8), 2, 4, 2), ((6, 10), 4, 3, 2), ((7, 5), 3, 5, 1), ((5, 9), 8, 2, 4),
               ((9, 7), 1, 3, 2), ((13, 11), 4, 6, 2)]


@pytest.mark.parametrize('qkv_bias', [True, False])
@pytest.mark.parametrize('hw_shape,window,landmarks,heads', DENSE_CASES,
                         ids=[f'{c[0][0]}x{c[0][1]}-w{c[1]}-r{c[2]}-h{c[3]}' for c in DENSE_CASES])
def test_equals_dense_reference(hw_shape, window, landmarks, heads, qkv_bias):
    mixer = build(num_heads=heads, window_size=window, num_landmarks=landmarks,
                  qkv_bias=qkv_bias).double()
    x = tokens(hw_shape, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, hw_shape), dense_reference(mixer, x, hw_shape),
                                   rtol=1e-10, atol=1e-10)


def short_branch_support(mixer, x, hw_shape, query_index, freeze_long):
    """Tokens whose change reaches output ``query_index`` (nonzero gradient), as an H x W map;
    with ``freeze_long`` the long keys/values are computed from a detached copy of ``x``."""
    x = x.clone().requires_grad_()
    query, key, value = mixer.project_qkv(x)
    if freeze_long:
        with torch.no_grad():
            _, key_in, value_in = mixer.project_qkv(x.detach())
            long_key, long_value = mixer.long_range_keys_values(x.detach(), key_in, value_in)
    else:
        long_key, long_value = mixer.long_range_keys_values(x, key, value)
    out = mixer.proj(mixer.attend(query, key, value, long_key, long_value, hw_shape))
    out[0, query_index].sum().backward()
    return (x.grad[0].abs().sum(dim=-1) != 0).reshape(hw_shape)


@pytest.mark.parametrize('position,rows,cols', [((5, 6), (2, 10), (2, 10)),
                                                ((0, 13), (0, 6), (10, 14)),
                                                ((11, 1), (6, 12), (0, 6))])
def test_short_branch_reaches_exactly_the_window_and_half_windows(position, rows, cols):
    hw_shape, window = (12, 14), 4  # windows rows/cols [0,4), [4,8), ...; halo 2
    mixer = build(num_heads=2, window_size=window, num_landmarks=3).double()
    x = tokens(hw_shape, dtype=torch.float64)
    query_index = position[0] * hw_shape[1] + position[1]
    support = short_branch_support(mixer, x, hw_shape, query_index, freeze_long=True)
    expected = torch.zeros(hw_shape, dtype=torch.bool)
    expected[rows[0]:rows[1], cols[0]:cols[1]] = True
    assert torch.equal(support, expected)
    if position == (5, 6):  # an interior window: a (2w) x (2w) key region
        assert int(support.sum()) == (2 * window)**2 == mixer.region_size**2
    # Through the long branch every token reaches every query.
    assert short_branch_support(mixer, x, hw_shape, query_index, freeze_long=False).all()


def test_every_parameter_gets_a_gradient():
    mixer = build(num_heads=2, window_size=3, num_landmarks=4).train()
    hw_shape = (7, 9)
    x = tokens(hw_shape).requires_grad_()
    out = mixer(x, hw_shape)
    (out * torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, param in mixer.named_parameters():
        assert param.grad is not None, f'{name} got no gradient'
        assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, name


def _autocast_supported(dtype) -> bool:
    try:
        with torch.autocast('cpu', dtype=dtype):
            torch.ones(2, 2) @ torch.ones(2, 2)
    except (RuntimeError, ValueError):
        return False
    return True


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16], ids=['bf16', 'fp16'])
def test_autocast_forward_backward_close_to_fp32(dtype):
    if not _autocast_supported(dtype):
        pytest.skip(f'CPU autocast does not support {dtype}')
    mixer = build(num_heads=2, window_size=4, num_landmarks=8, perturb=False)
    hw_shape = (20, 28)
    x = tokens(hw_shape)
    reference = mixer(x, hw_shape)
    with torch.autocast('cpu', dtype=dtype):
        out = mixer(x, hw_shape)
        long_key, _ = mixer.long_range_keys_values(x, *mixer.project_qkv(x)[1:])
    assert out.dtype == dtype and long_key.dtype == torch.float32  # the fp32 island
    relative = (out.float() - reference).norm() / reference.norm()
    assert torch.isfinite(out).all() and relative < 0.03, f'relative L2 error {relative:.4f}'
    out.float().square().mean().backward()
    for name, param in mixer.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name


GRIDS = [(8, 8), (6, 10), (7, 5), (16, 12)]


@pytest.mark.parametrize('grid', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
def test_traced_count_equals_analytic_flops(grid):
    """Per term, at a window larger than some grids (windows 2 and 3: test_flops.py)."""
    mixer = build(num_heads=2, window_size=8, num_landmarks=4, perturb=False)
    batch = 2
    counted = count_mixer_flops(mixer, grid, batch_size=batch)
    analytic = mixer.flops(grid)
    assert tuple(analytic) == LongShortAttentionMixer.flop_terms
    traced = sum(v for op, v in counted.items() if op not in NORM_OPS)
    assert traced == pytest.approx(batch * sum(analytic.values()), rel=1e-12)
    attention = counted['scaled_dot_product_attention']
    assert attention == pytest.approx(batch * analytic['attention'], rel=1e-12)
    assert counted == count_mixer_flops(mixer, grid, batch, attention_stand_in=True)


def test_cost_grows_linearly_in_tokens():
    mixer = build(num_heads=2, window_size=4, num_landmarks=8, perturb=False)
    full = FullSelfAttentionMixer(EMBED_DIMS, num_heads=2)
    grids = [(16, 16), (32, 32), (64, 64)]
    traced = [sum(v for op, v in count_mixer_flops(mixer, g).items() if op not in NORM_OPS)
              for g in grids]
    for small, large in zip(traced, traced[1:]):
        assert large / small == pytest.approx(4.0, rel=1e-12)  # 4x tokens, 4x FLOPs
    analytic = [sum(mixer.flops(g).values()) for g in [(64, 64), (256, 256)]]
    assert analytic[1] / analytic[0] == pytest.approx(16.0, rel=1e-12)
    # Full attention grows ~16x for the same 4x tokens; at 64 x 64 LS is already far cheaper.
    assert sum(full.flops((64, 64)).values()) > 10 * traced[-1]


def test_flops_count_the_padded_grid():
    mixer = build(num_heads=2, window_size=8, num_landmarks=4, perturb=False)
    # 9 x 9 pads to 16 x 16 windows of queries; the other terms see the 81 real tokens.
    flops, exact = mixer.flops((9, 9)), mixer.flops((16, 16))
    assert flops['attention'] == exact['attention']
    assert flops['qkv'] == exact['qkv'] * 81 / 256


def test_bad_arguments_and_shapes():
    with pytest.raises(ValueError, match='divisible by num_heads'):
        LongShortAttentionMixer(10, num_heads=3)
    with pytest.raises(ValueError, match='window_size and num_landmarks'):
        LongShortAttentionMixer(16, num_heads=2, num_landmarks=0)
    mixer = build(num_heads=2, window_size=2, num_landmarks=4)
    with pytest.raises(ValueError, match='expected tokens of shape'):
        mixer(tokens((4, 4)), (4, 5))


def test_tiny_mixer_mit_forward_backward():
    torch.manual_seed(0)
    mixer_cfg = dict(type='LongShortAttentionMixer', window_size=4, num_landmarks=4)
    model = MixerMiT(embed_dims=8, num_layers=[1, 1, 1, 1], num_heads=[1, 2, 5, 8],
                     mixers=mixer_cfg)
    model.init_weights()
    layers = [stage[1][0].attn for stage in model.layers]
    assert all(isinstance(m, LongShortAttentionMixer) for m in layers)
    assert [m.num_heads for m in layers] == [1, 2, 5, 8]
    assert [m.norm_short_key.eps for m in layers] == [1e-6] * 4  # MiT's norm_cfg passed down
    outs = model(torch.randn(1, 3, 64, 96))
    assert [tuple(o.shape[1:]) for o in outs] == [(8, 16, 24), (16, 8, 12), (40, 4, 6),
                                                  (64, 2, 3)]
    sum((o * torch.randn_like(o)).sum() for o in outs).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
