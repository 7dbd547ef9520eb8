"""DFFormer's dynamic filter (``DynamicFilterMixer``) against an independent formula: explicit DFT
sums, Keys' bicubic kernel written out as interpolation matrices, the routing softmax written
out; the released parameter layout; bad arguments."""
import copy
import math

import pytest
import torch

from afno_seg.mixers import DynamicFilterMixer, use_form
from afno_seg.mixers.dff import resize_filters


def bicubic_matrix(out_size: int, in_size: int, a: float = -0.75) -> torch.Tensor:
    """``(out, in)`` matrix of 1-D bicubic interpolation with corners aligned: output ``i`` read
    at ``i (in - 1) / (out - 1)`` with Keys' kernel, taps beyond the ends clamped to them."""
    def keys(d: float) -> float:
        d = abs(d)
        if d <= 1:
            return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a if d < 2 else 0.0

    matrix = torch.zeros(out_size, in_size, dtype=torch.float64)
    scale = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    for i in range(out_size):
        position = i * scale
        left = math.floor(position)
        for tap in range(left - 1, left + 3):
            matrix[i, min(max(tap, 0), in_size - 1)] += keys(position - tap)
    return matrix


def affine(x, layer):
    return x @ layer.weight.T + (0.0 if layer.bias is None else layer.bias)


def star_relu(x, act):
    return act.scale * torch.relu(x) ** 2 + act.bias


def explicit_dynamic_filter(mixer: DynamicFilterMixer, x: torch.Tensor, hw) -> torch.Tensor:
    """The paper's mixer from sums: routing softmax over K, bicubic filters, DFT by definition,
    ``irfft2`` as the real part of the Hermitian-weighted half-spectrum sum."""
    (height, width), (batch, tokens, _) = hw, x.shape
    cols, filters, med = width // 2 + 1, mixer.num_filters, mixer.med_channels
    pooled = x.sum(1) / tokens
    hidden = star_relu(pooled @ mixer.reweight.fc1.weight.T, mixer.reweight.act)
    logits = (hidden @ mixer.reweight.fc2.weight.T).reshape(batch, filters, med)
    routing = torch.exp(logits) / torch.exp(logits).sum(1, keepdim=True)  # over the K filters
    base = mixer.complex_weights  # (h0, w0', K, 2)
    rows, columns = (bicubic_matrix(height, base.shape[0]),
                     bicubic_matrix(cols, base.shape[1]))
    planes = torch.einsum('ih,jw,hwkp->ijkp', rows, columns, base)
    kernel = torch.einsum('bkd,ijk->bijd', routing.to(torch.complex128),
                          torch.complex(planes[..., 0], planes[..., 1]))
    u = star_relu(affine(x, mixer.pwconv1), mixer.act1)
    u = u.reshape(batch, height, width, med).to(torch.complex128)
    m, n = torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64)
    k, j = m, torch.arange(cols, dtype=torch.float64)
    phase_h = torch.exp(-2j * math.pi * torch.outer(k, m) / height)  # (k, m)
    phase_w = torch.exp(-2j * math.pi * torch.outer(j, n) / width)  # (j, n)
    spectrum = torch.einsum('km,bmjd->bkjd', phase_h, torch.einsum('jn,bmnd->bmjd', phase_w, u))
    spectrum = spectrum / math.sqrt(height * width)
    weight = torch.full((cols, ), 2.0, dtype=torch.float64)
    weight[0] = 1.0
    if width % 2 == 0:
        weight[-1] = 1.0
    y = torch.einsum('km,bkjd->bmjd', phase_h.conj(), spectrum * kernel * weight[:, None])
    y = torch.einsum('jn,bmjd->bmnd', phase_w.conj(), y).real / math.sqrt(height * width)
    return affine(y.reshape(batch, tokens, med), mixer.pwconv2)


def o1_mixer(seed=0, **kwargs) -> DynamicFilterMixer:
    """Float64, parameters O(1) (StarReLU's bias and scale away from 1 and 0) so that every term
    shows in the output."""
    torch.manual_seed(seed)
    mixer = DynamicFilterMixer(**kwargs).double()
    with torch.no_grad():
        for param in mixer.parameters():
            param.copy_(0.4 * torch.randn_like(param) + (0.7 if param.numel() == 1 else 0.0))
    return mixer


CASES = [  # (constructor arguments, grid): at the base grid, resized up, down, odd, non-square
    pytest.param(dict(embed_dims=8, base_hw_shape=(6, 8)), (6, 8), id='at-base'),
    pytest.param(dict(embed_dims=8, base_hw_shape=(6, 8)), (9, 13), id='up-odd'),
    pytest.param(dict(embed_dims=12, base_hw_shape=(10, 7), num_filters=3, expansion_ratio=1.5,
                      reweight_expansion_ratio=0.5, bias=True), (5, 6), id='down-k3-bias'),
    pytest.param(dict(embed_dims=8, base_hw_shape=(4, 4), num_filters=1), (1, 3), id='1x3-k1'),
    # both axes factored in the matmul form (its spectrum out of natural order)
    pytest.param(dict(embed_dims=4, base_hw_shape=(8, 8)), (32, 256), id='factored'),
]


@pytest.mark.parametrize('kwargs, hw', CASES)
@pytest.mark.parametrize('form', ['reference', 'fast', 'matmul'])
def test_equals_explicit_formula_with_gradients(kwargs, hw, form):
    """Output, input gradient and every parameter's gradient (float64, 1e-10); float32 output
    within 1e-5 relative of the float64 formula."""
    mixer = o1_mixer(**kwargs)
    x = torch.randn(2, hw[0] * hw[1], kwargs['embed_dims'], dtype=torch.float64,
                    requires_grad=True)
    grad = torch.randn_like(x)
    params = [x, *mixer.parameters()]
    expected = explicit_dynamic_filter(mixer, x, hw)
    expected_grads = torch.autograd.grad(expected, params, grad)
    with use_form(form):
        out = mixer(x, hw)
        out32 = copy.deepcopy(mixer).float()(x.detach().float(), hw).detach()
    got_grads = torch.autograd.grad(out, params, grad)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    for name, got, want in zip(['x', *dict(mixer.named_parameters())], got_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=name)
    expected = expected.detach()
    assert float((out32.double() - expected).norm() / expected.norm()) < 1e-5
    assert float(expected.norm() / x.detach().norm()) > 0.1  # the mixer's output is not negligible


@pytest.mark.parametrize('size, base', [((9, 5), (6, 4)), ((4, 3), (7, 8)), ((1, 2), (5, 3)),
                                        ((6, 4), (6, 4))])
def test_filters_resize_bicubically_with_corners_aligned(size, base):
    """Real and imaginary planes each ``R_h F R_w^T``; corners kept; at its own size untouched."""
    weight = torch.randn(*base, 3, 2, dtype=torch.float64)
    resized = resize_filters(weight, size)
    expected = torch.einsum('ih,jw,hwkp->ijkp', bicubic_matrix(size[0], base[0]),
                            bicubic_matrix(size[1], base[1]), weight)
    torch.testing.assert_close(resized, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(resized[0, 0], weight[0, 0])
    if size[0] > 1 and size[1] > 1:
        torch.testing.assert_close(resized[-1, -1], weight[-1, -1])
    assert (resized is weight) == (size == base)


def test_released_parameter_names_and_shapes():
    """The released ``DynamicFilter(dim=16, size=(6, 10))``'s state dict, name for name."""
    mixer = DynamicFilterMixer(16, base_hw_shape=(6, 10))
    shapes = {name: tuple(value.shape) for name, value in mixer.state_dict().items()}
    assert shapes == {
        'pwconv1.weight': (32, 16), 'act1.scale': (1, ), 'act1.bias': (1, ),
        'reweight.fc1.weight': (4, 16), 'reweight.act.scale': (1, ), 'reweight.act.bias': (1, ),
        'reweight.fc2.weight': (4 * 32, 4), 'complex_weights': (6, 6, 4, 2),
        'pwconv2.weight': (16, 32)}
    # StarReLU starts as ReLU^2, and the routing weights of each channel sum to 1 over K.
    assert mixer.act1.scale.item() == 1.0 and mixer.act1.bias.item() == 0.0
    routing = mixer.routing(torch.randn(3, 60, 16))
    torch.testing.assert_close(routing.sum(1), torch.ones(3, 32))


def test_flops_by_term():
    mixer = DynamicFilterMixer(16, base_hw_shape=(8, 8))
    flops = mixer.flops((6, 10))
    assert flops['pwconv'] == 4 * 60 * 16 * 32
    assert flops['routing'] == 2 * 4 * 16 + 2 * 4 * 4 * 32
    assert flops['filter'] == (4 * 4 + 6) * 32 * 6 * 6


@pytest.mark.parametrize('kwargs, message', [
    (dict(base_hw_shape=(0, 8)), r'base_hw_shape .*\(0, 8\)'),
    (dict(base_hw_shape=(8, -2)), r'base_hw_shape .*\(8, -2\)'),
    (dict(num_filters=0), 'num_filters .* 0'),
    (dict(expansion_ratio=0.05), r'expansion_ratio \* embed_dims .* 0.05 \* 16'),
    (dict(reweight_expansion_ratio=0.05), r'reweight_expansion_ratio \* embed_dims .* 0.05'),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        DynamicFilterMixer(16, **kwargs)
    assert '\n' not in str(error.value)
