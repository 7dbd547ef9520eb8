"""MSCA (SegNeXt) mixer: mmseg's ``MSCASpatialAttention`` loads unmapped and gives the same output
and gradients; the whole module equals an independent formula (depth-wise convolutions as explicit
window sums, 1x1 convolutions as einsums) on grids smaller than the kernels, odd and non-square;
bad kernel arguments are refused."""
import pytest
import torch
import torch.nn.functional as F
from mmseg.models.backbones.mscan import MSCASpatialAttention

from afno_seg.mixers.msca import MSCAMixer

from mixer_examples import relative_error

EMBED_DIMS = 6
SMALL = dict(attention_kernel_sizes=(3, (1, 5), (1, 7), (1, 9)),
             attention_kernel_paddings=(1, (0, 2), (0, 3), (0, 4)), act_cfg=dict(type='ReLU'))
MMSEG_ARGS = {'default': {}, 'small-relu': SMALL}
# Square, non-square with odd sides, smaller than the 21-tap strips, a single row.
GRIDS = [(8, 8), (7, 12), (5, 3), (1, 9)]


def tokens(hw_shape, batch=2, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, hw_shape[0] * hw_shape[1], EMBED_DIMS, generator=generator,
                       dtype=dtype)


def released(seed=0, **kwargs) -> MSCASpatialAttention:
    """mmseg's module, every parameter moved off its initial value (biases included)."""
    torch.manual_seed(seed)
    module = MSCASpatialAttention(EMBED_DIMS, **kwargs)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.5 * torch.randn_like(param))
    return module.double()


def to_grid(x, hw_shape):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw_shape).contiguous()


def depthwise(grid, conv):
    """A depth-wise cross-correlation as a sum of shifted copies of the zero-padded grid."""
    (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
    height, width = grid.shape[-2:]
    padded = F.pad(grid, (pw, pw, ph, ph))
    out = conv.bias.view(1, -1, 1, 1).expand_as(grid).clone()
    for dy in range(kh):
        for dx in range(kw):
            out += conv.weight[:, 0, dy, dx].view(1, -1, 1, 1) * \
                padded[:, :, dy:dy + height, dx:dx + width]
    return out


def pointwise(grid, conv):
    return torch.einsum('oi,bihw->bohw', conv.weight[:, :, 0, 0], grid) + \
        conv.bias.view(1, -1, 1, 1)


def formula(mixer, x, hw_shape, activation):
    """``out = W2 (W3 (s + sum_i S_i s) * a) + X``, ``s = D0 a``, ``a = act(W1 X)``, written out."""
    gate = mixer.spatial_gating_unit
    grid = to_grid(x, hw_shape)
    a = activation(pointwise(grid, mixer.proj_1))
    s = depthwise(a, gate.conv0)
    branches = [depthwise(depthwise(s, getattr(gate, f'conv{i}_1')), getattr(gate, f'conv{i}_2'))
                for i in range(3)]
    attention = pointwise(s + sum(branches), gate.conv3)
    out = pointwise(attention * a, mixer.proj_2) + grid
    return out.flatten(2).transpose(1, 2)


@pytest.mark.parametrize('args', MMSEG_ARGS.values(), ids=MMSEG_ARGS.keys())
@pytest.mark.parametrize('hw_shape', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
def test_equals_mmseg_module_with_its_state_dict(args, hw_shape):
    """mmseg's state dict loads with strict=True and no key mapping; output, input gradient and
    every parameter's gradient equal mmseg's module run on the (B, C, H, W) grid, float64."""
    reference = released(**args)
    mixer = MSCAMixer(EMBED_DIMS, **args).double()
    mixer.load_state_dict(reference.state_dict(), strict=True)
    assert list(mixer.state_dict()) == list(reference.state_dict())
    x = tokens(hw_shape).requires_grad_()
    grad = tokens(hw_shape, seed=1)
    out = mixer(x, hw_shape)
    grids = to_grid(x, hw_shape)
    expected = reference(grids).flatten(2).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    got = torch.autograd.grad(out, [x, *mixer.parameters()], grad)
    want = torch.autograd.grad(expected, [x, *reference.parameters()], grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('args,activation', [({}, F.gelu), (SMALL, F.relu)],
                         ids=['default-gelu', 'small-relu'])
@pytest.mark.parametrize('hw_shape', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
def test_equals_the_written_out_formula(args, activation, hw_shape):
    """Kernel sizes, paddings, branch wiring, gate and residual against explicit window sums;
    float64. On a 5x3 grid most taps of the 21-tap strips fall on padding."""
    mixer = MSCAMixer(EMBED_DIMS, **args).double()
    mixer.load_state_dict(released(**args).state_dict())
    x = tokens(hw_shape)
    with torch.no_grad():
        out = mixer(x, hw_shape)
        torch.testing.assert_close(out, formula(mixer, x, hw_shape, activation),
                                   rtol=1e-10, atol=1e-12)
    assert (out - x).abs().max() > 0.1  # the branch is not negligible beside the residual


def test_float32_matches_mmseg_within_1e5():
    """float32, relative L2 error of the output, the input gradient and every parameter gradient
    (the float64 tests above hold the identity to 1e-10)."""
    reference = released().float()
    mixer = MSCAMixer(EMBED_DIMS).float()
    mixer.load_state_dict(reference.state_dict())
    hw_shape = (9, 14)
    x = tokens(hw_shape, dtype=torch.float32).requires_grad_()
    grad = tokens(hw_shape, seed=1, dtype=torch.float32)
    out = mixer(x, hw_shape)
    expected = reference(to_grid(x, hw_shape)).flatten(2).transpose(1, 2)
    assert relative_error(out, expected) < 1e-5
    got = torch.autograd.grad(out, [x, *mixer.parameters()], grad)
    want = torch.autograd.grad(expected, [x, *reference.parameters()], grad)
    for g, w in zip(got, want):
        assert relative_error(g, w) < 1e-5


def test_flops_count_every_kernel_tap():
    """103 taps with the defaults (5x5 + 2 x (7 + 11 + 21)), 35 for the small kernels."""
    for args, taps in (({}, 103), (SMALL, 9 + 2 * (5 + 7 + 9))):
        flops = MSCAMixer(EMBED_DIMS, **args).flops((3, 5))
        assert flops == {'depthwise': 2.0 * taps * EMBED_DIMS * 15,
                         'pointwise': 6.0 * EMBED_DIMS ** 2 * 15}


@pytest.mark.parametrize('args,message', [
    (dict(attention_kernel_sizes=(5, (1, 7), (1, 11))), 'need 4 entries'),
    (dict(attention_kernel_paddings=(2, (0, 3), (0, 5))), 'need 4 entries'),
    (dict(attention_kernel_sizes=(4, (1, 7), (1, 11), (1, 21))),
     r'attention_kernel_paddings\[0\] .* got size 4 and padding 2'),
    (dict(attention_kernel_paddings=(2, (0, 3), (0, 4), (0, 10))),
     r'attention_kernel_paddings\[2\] .* got size \(1, 11\) and padding \(0, 4\)'),
    (dict(attention_kernel_paddings=(2, (1, 3), (0, 5), (0, 10))),
     r'attention_kernel_paddings\[1\]'),
], ids=['three-sizes', 'three-paddings', 'even-kernel', 'short-padding', 'padded-strip'])
def test_bad_kernel_arguments_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        MSCAMixer(EMBED_DIMS, **args)


@pytest.mark.slow  # one inductor compile, 10-40 s
def test_torch_compile_with_dynamic_shapes():
    """What a second stage (another width and grid) triggers: a dynamic-shape compile. Inductor
    failed there on a channels-last grid (torch 2.14)."""
    torch.manual_seed(0)
    mixer, hw_shape = MSCAMixer(12), (5, 7)
    x = torch.randn(2, 35, 12, requires_grad=True)
    out = torch.compile(mixer, dynamic=True)(x, hw_shape)
    (grad, ) = torch.autograd.grad(out.square().sum(), x)
    expected = mixer(x, hw_shape)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.square().sum(), x)[0],
                               rtol=1e-4, atol=1e-5)
