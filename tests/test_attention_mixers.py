"""Attention token mixers: mmseg weight compatibility, exact attention math, axial locality and
connectivity, analytic FLOPs against a traced count (shapes, gradients, bf16 autocast and both
registries: the contract suite)."""
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from afno_seg.mixers.attention import EfficientSelfAttentionMixer, FullSelfAttentionMixer
from afno_seg.mixers.axial import AxialAttentionMixer
from afno_seg.registry import MMSEG_MODELS


def tokens(height, width, channels=8, batch=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, height * width, channels, generator=generator)


def reference_attention(query_in, kv_in, in_weight, in_bias, out_weight, out_bias, num_heads):
    """Multi-head attention written out: concat_i softmax(Q_i K_i^T / sqrt(d)) V_i, then W_o."""
    channels = query_in.shape[-1]
    w_q, w_k, w_v = in_weight.split(channels)
    b_q, b_k, b_v = in_bias.split(channels)
    query, key, value = query_in @ w_q.T + b_q, kv_in @ w_k.T + b_k, kv_in @ w_v.T + b_v
    head_dims = channels // num_heads
    heads = []
    for head in range(num_heads):
        part = slice(head * head_dims, (head + 1) * head_dims)
        scores = query[..., part] @ key[..., part].transpose(-1, -2) / math.sqrt(head_dims)
        heads.append(scores.softmax(dim=-1) @ value[..., part])
    return torch.cat(heads, dim=-1) @ out_weight.T + out_bias


# ---------------------------------------------------------------- efficient / full attention

@pytest.mark.parametrize('sr_ratio', [1, 2])
@pytest.mark.parametrize('hw_shape', [(6, 10), (7, 9)])
@pytest.mark.parametrize('qkv_bias', [True, False])
def test_efficient_attention_loads_mmseg_weights_and_matches(sr_ratio, hw_shape, qkv_bias):
    from mmseg.models.backbones.mit import EfficientMultiheadAttention
    torch.manual_seed(0)
    # MiT passes its norm_cfg (LN, eps 1e-6) down to the attention's reduction norm.
    theirs = EfficientMultiheadAttention(embed_dims=8, num_heads=2, attn_drop=0., proj_drop=0.,
                                         batch_first=True, qkv_bias=qkv_bias,
                                         norm_cfg=dict(type='LN', eps=1e-6),
                                         sr_ratio=sr_ratio).eval()
    with torch.no_grad():  # non-trivial norm affine so a swapped/missing norm would show
        for param in theirs.parameters():
            param.add_(0.1 * torch.randn_like(param))
    ours = EfficientSelfAttentionMixer(8, 2, sr_ratio=sr_ratio, qkv_bias=qkv_bias).eval()
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = tokens(*hw_shape)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, hw_shape) + x, theirs(x, hw_shape),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('hw_shape', [(5, 7), (4, 4)])
def test_full_attention_equals_explicit_softmax(hw_shape):
    torch.manual_seed(1)
    mixer = FullSelfAttentionMixer(8, num_heads=2).eval()
    x = tokens(*hw_shape)
    attn = mixer.attn
    expected = reference_attention(x, x, attn.in_proj_weight, attn.in_proj_bias,
                                   attn.out_proj.weight, attn.out_proj.bias, num_heads=2)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, hw_shape), expected, rtol=1e-5, atol=1e-5)


def test_full_attention_refuses_sr_ratio():
    with pytest.raises(TypeError, match='sr_ratio'):
        FullSelfAttentionMixer(8, 2, sr_ratio=2)
    with pytest.raises(TypeError, match='sr_ratio'):
        MMSEG_MODELS.build(dict(type='FullSelfAttentionMixer', embed_dims=8, num_heads=2,
                                sr_ratio=2))


def test_efficient_attention_rejects_bad_arguments():
    with pytest.raises(ValueError, match='divisible'):
        EfficientSelfAttentionMixer(10, num_heads=3)
    with pytest.raises(ValueError, match='sr_ratio'):
        EfficientSelfAttentionMixer(8, 2, sr_ratio=0)
    mixer = EfficientSelfAttentionMixer(8, 2, sr_ratio=4)
    with pytest.raises(ValueError, match='smaller than sr_ratio'):
        mixer(tokens(3, 9), (3, 9))
    with pytest.raises(ValueError, match='expected tokens'):
        mixer(tokens(8, 8), (8, 9))


class LargestOutput(TorchDispatchMode):
    """Records the largest number of elements any dispatched op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in out if isinstance(out, (tuple, list)) else (out, ):
            if isinstance(item, torch.Tensor):
                self.largest = max(self.largest, item.numel())
        return out


@pytest.mark.parametrize('sr_ratio', [1, 2])
def test_attention_matrix_is_not_materialised(sr_ratio):
    """Through SDPA's fused CPU kernel no op outputs the (N, M) attention matrix."""
    mixer = EfficientSelfAttentionMixer(8, 1, sr_ratio=sr_ratio)
    hw_shape = (32, 32)
    x = tokens(*hw_shape, batch=1)
    reduced = (32 // mixer.sr_ratio)**2
    with torch.no_grad(), LargestOutput() as recorder:
        mixer.eval()(x, hw_shape)
    assert recorder.largest < 32 * 32 * reduced / 8  # activations are 3NC; the matrix is NM


# ---------------------------------------------------------------- axial attention

def block_jacobian(function, hw_shape, channels=4):
    """``(N_out, N_in)`` Frobenius norms of the Jacobian blocks d out[p] / d x[q]."""
    x = tokens(*hw_shape, channels=channels, batch=1)[0]
    jacobian = torch.autograd.functional.jacobian(
        lambda flat: function(flat.unsqueeze(0), hw_shape)[0], x)  # (N, C, N, C)
    return jacobian.pow(2).sum(dim=(1, 3)).sqrt()


def test_axial_height_pass_mixes_only_columns():
    torch.manual_seed(2)
    mixer = AxialAttentionMixer(8, num_heads=2).eval()
    hw_shape, (row, col) = (5, 6), (2, 3)
    x = tokens(*hw_shape)
    perturbed = x.clone().view(2, 5, 6, 8)
    perturbed[:, row, col] += 1.
    with torch.no_grad():
        change = (mixer.attend(perturbed.view(2, 30, 8), hw_shape, axis=1)
                  - mixer.attend(x, hw_shape, axis=1)).abs().amax(dim=(0, 2)).view(5, 6)
    same_column = torch.zeros(5, 6, dtype=torch.bool)
    same_column[:, col] = True
    assert change[~same_column].max() == 0
    assert change[same_column].min() > 1e-6


def test_axial_jacobian_connectivity():
    """Height pass: d u[p] / d x[q] != 0 exactly when p, q share a column; full mixer: all pairs."""
    torch.manual_seed(3)
    mixer = AxialAttentionMixer(4, num_heads=2).double()
    hw_shape = (4, 5)
    height_blocks = block_jacobian(lambda t, hw: mixer.attend(t.double(), hw, axis=1),
                                   hw_shape)
    columns = torch.arange(20) % 5
    same_column = columns[:, None] == columns[None, :]
    assert height_blocks[~same_column].max() == 0
    assert height_blocks[same_column].min() > 1e-8
    width_blocks = block_jacobian(lambda t, hw: mixer.attend(t.double(), hw, axis=2),
                                  hw_shape)
    rows = torch.arange(20) // 5
    assert width_blocks[rows[:, None] != rows[None, :]].max() == 0
    full_blocks = block_jacobian(lambda t, hw: mixer(t.double(), hw), hw_shape)
    assert full_blocks.min() > 1e-8  # every output depends on every input


def test_axial_one_wide_grid_is_one_dimensional_attention():
    """W = 1: the width pass attends over one token (weight 1), leaving its value projection,
    so the mixer is 1-D attention along H with output map proj o v_width. H = 1 mirrors it."""
    torch.manual_seed(4)
    mixer = AxialAttentionMixer(8, num_heads=2).eval()
    channels = 8
    qkv_h, qkv_w, proj = mixer.qkv_height, mixer.qkv_width, mixer.proj
    x = tokens(7, 1)
    value_w, value_b = qkv_w.weight[2 * channels:], qkv_w.bias[2 * channels:]
    expected = reference_attention(x, x, qkv_h.weight, qkv_h.bias,
                                   proj.weight @ value_w, proj.weight @ value_b + proj.bias, 2)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, (7, 1)), expected, rtol=1e-5, atol=1e-5)
    x = tokens(1, 7)
    value_w, value_b = qkv_h.weight[2 * channels:], qkv_h.bias[2 * channels:]
    expected = reference_attention(x, x, qkv_w.weight @ value_w, qkv_w.weight @ value_b
                                   + qkv_w.bias, proj.weight, proj.bias, 2)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, (1, 7)), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- all three mixers

MIXERS = {
    'esa_sr2': lambda: EfficientSelfAttentionMixer(8, 2, sr_ratio=2),
    'esa_sr4': lambda: EfficientSelfAttentionMixer(8, 2, sr_ratio=4),
    'full': lambda: FullSelfAttentionMixer(8, 2),
    'axial': lambda: AxialAttentionMixer(8, 2),
}


@pytest.mark.parametrize('name', MIXERS)
@pytest.mark.parametrize('hw_shape', [(6, 10), (5, 7)])
def test_flops_match_traced_count(name, hw_shape):
    """FlopCounterMode counts 2 FLOPs per MAC for mm/addmm/bmm/conv, as our convention does, and
    skips biases and softmax; the math SDPA backend exposes the two attention bmm's to it (the
    CPU flash kernel has no registered formula)."""
    mixer = MIXERS[name]().eval()
    analytic = mixer.flops(hw_shape)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        mixer(tokens(*hw_shape, batch=1), hw_shape)
    by_op = {str(op).split('.')[-1]: count for op, count in counter.get_flop_counts()['Global']
             .items()}
    assert by_op.get('mm', 0) + by_op.get('addmm', 0) == analytic['qkv'] + analytic['proj']
    assert by_op.get('bmm', 0) == analytic['attention']
    assert by_op.get('convolution', 0) == analytic.get('reduction', 0)
    assert counter.get_total_flops() == sum(analytic.values())


def test_dropout_is_training_only():
    mixer = AxialAttentionMixer(8, 2, attn_drop_rate=0.5, proj_drop_rate=0.5)
    x = tokens(6, 5)
    with torch.no_grad():
        torch.testing.assert_close(mixer.eval()(x, (6, 5)), mixer(x, (6, 5)))
        assert not torch.allclose(mixer.train()(x, (6, 5)), mixer.eval()(x, (6, 5)))
