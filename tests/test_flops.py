"""FLOP accounting: FFT/complex/attention handles, traced counts == each mixer's analytic flops(),
the per-stage breakdown of a segmentor, and the two analysis tools."""
import json
import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import afno_seg.mixers as mixers
from afno_seg.analysis import FLOPS_PER_MAC, build_flop_analyzer, count_mixer_flops
from afno_seg.analysis import flops as flops_module
from afno_seg.analysis.complexity import stage1_labels
from afno_seg.analysis.flops import NORM_OPS, is_fft_op
from afno_seg.analysis.tracing import shape_only_attention, tracing_for_flops
from afno_seg.mixers import AFNOMixer, FNetMixer, FNOMixer, GlobalFilterMixer
from afno_seg.mixers.forms import use_form
from afno_seg.mixers.spectral import SpectralBand

from conftest import TINY_CONFIG, load_script
from mixer_examples import example_cases


class Call(nn.Module):
    """``forward(x) = fn(x)`` so that a bare function can be traced."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def counted_flops(fn, *inputs) -> dict:
    """FLOPs by op name of tracing ``fn(*inputs)`` with afno_seg's handles."""
    analyzer = build_flop_analyzer(Call(fn).eval(), inputs)
    with torch.no_grad():
        return {op: FLOPS_PER_MAC * v for op, v in analyzer.by_operator().items()}


def fft_cost(points: int, batch: int, real: bool) -> float:
    return batch * (2.5 if real else 5.0) * points * math.log2(points)


REAL = torch.randn(2, 6, 10, 4)
CPLX = torch.randn(2, 6, 10, 4, dtype=torch.complex64)
# (name, fn, input, batch of transforms, points per transform, real-data transform)
FFT_CASES = [
    ('rfft2 grid axes', lambda t: torch.fft.rfft2(t, dim=(1, 2)), REAL, 8, 60, True),
    ('irfft2 odd width', lambda t: torch.fft.irfft2(t, s=(6, 9), dim=(1, 2)), CPLX, 8, 54, True),
    ('rfft padded n', lambda t: torch.fft.rfft(t, n=12, dim=1), REAL, 80, 12, True),
    ('rfft default dim', lambda t: torch.fft.rfft(t), REAL, 120, 4, True),
    ('fft of real input', lambda t: torch.fft.fft(t, dim=2), REAL, 48, 10, True),
    ('fft complex', lambda t: torch.fft.fft(t, dim=2), CPLX, 48, 10, False),
    ('fft2 default dims', lambda t: torch.fft.fft2(t), CPLX, 12, 40, False),
    ('ifft2 padded s', lambda t: torch.fft.ifft2(t, s=(8, 8), dim=(1, 2)), CPLX, 8, 64, False),
    ('fftn all dims (FNet)', lambda t: torch.fft.fftn(t), REAL, 1, 480, True),
    ('rfftn s on last dims', lambda t: torch.fft.rfftn(t, s=(6, 12)), REAL, 12, 72, True),
    ('irfftn default size', lambda t: torch.fft.irfftn(t, dim=(1, 2)), CPLX, 8, 108, True),
    ('hfft', lambda t: torch.fft.hfft(t, n=10, dim=2), CPLX, 48, 10, True),
    ('ihfft2', lambda t: torch.fft.ihfft2(t, dim=(1, 2)), REAL, 8, 60, True),
    ('_fft_r2c', lambda t: torch._fft_r2c(t, [1, 2], 0, True), REAL, 8, 60, True),
    ('_fft_c2c', lambda t: torch._fft_c2c(t, [1, 2], 0, True), CPLX, 8, 60, False),
    ('_fft_c2r', lambda t: torch._fft_c2r(t[:, :, :5], [1, 2], 0, 9), CPLX, 8, 54, True),
]


@pytest.mark.parametrize('name,fn,inp,batch,points,real', FFT_CASES, ids=[c[0] for c in FFT_CASES])
def test_fft_handles(name, fn, inp, batch, points, real):
    counts = counted_flops(fn, inp)
    assert len(counts) == 1 and is_fft_op(next(iter(counts)))
    assert next(iter(counts.values())) == pytest.approx(fft_cost(points, batch, real), rel=1e-12)


def test_complex_products_count_four_real_multiply_adds():
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 2)
    real = counted_flops(torch.bmm, a, b)['bmm']
    assert real == 2 * 3 * 5 * 7 * 2
    assert counted_flops(torch.bmm, a.to(torch.complex64), b.to(torch.complex64))['bmm'] == \
        4 * real
    bias = torch.randn(3, 1, 2)
    assert counted_flops(torch.baddbmm, bias, a, b)['baddbmm'] == real
    # A matrix applied to a batch: mmengine's own handle drops the broadcast batch.
    assert counted_flops(torch.matmul, torch.randn(4, 6), torch.randn(5, 6, 3))['matmul'] == \
        2 * 5 * 4 * 6 * 3


def test_elementwise_complex_products():
    spectrum = torch.randn(2, 6, 4, 3, dtype=torch.complex64)
    kernel = torch.randn(6, 4, 3, dtype=torch.complex64)
    assert counted_flops(torch.mul, spectrum, kernel) == {'complex_mul': 6 * spectrum.numel()}
    assert counted_flops(torch.mul, spectrum, kernel.real) == {'complex_mul': 2 * spectrum.numel()}
    assert counted_flops(lambda s: s * 0.5, spectrum) == {}
    assert counted_flops(torch.mul, spectrum.real, kernel.real) == {}


@pytest.mark.parametrize('query_len,key_len,value_dim', [(12, 12, 8), (20, 5, 8), (9, 4, 6)])
def test_attention_counted_with_real_kernel_and_stand_in(query_len, key_len, value_dim):
    q, k = torch.randn(2, 3, query_len, 8), torch.randn(2, 3, key_len, 8)
    v = torch.randn(2, 3, key_len, value_dim)
    expected = 2 * 2 * 3 * query_len * key_len * (8 + value_dim)
    sdpa = nn.functional.scaled_dot_product_attention
    assert counted_flops(sdpa, q, k, v) == {'scaled_dot_product_attention': expected}
    with shape_only_attention():
        assert nn.functional.scaled_dot_product_attention is not sdpa
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        assert out.shape == (2, 3, query_len, value_dim)
        assert counted_flops(lambda *t: nn.functional.scaled_dot_product_attention(*t),
                             q, k, v) == {'scaled_dot_product_attention': expected}
    assert nn.functional.scaled_dot_product_attention is sdpa


class _WrappedRfft2(torch.autograd.Function):
    """An FFT behind a custom autograd Function, as the spectral mixers wrap theirs."""

    @staticmethod
    def forward(ctx, x):
        ctx.note = 'attributes on ctx must work inline'
        ctx.save_for_backward(x)
        return torch.fft.rfft2(x, dim=(1, 2))

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError


class _WrappedIrfft2(torch.autograd.Function):
    """New-style Function (``setup_context``): its forward takes no ``ctx``."""

    @staticmethod
    def forward(spectrum, width):
        return torch.fft.irfft2(spectrum, s=(spectrum.shape[1], width), dim=(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class _Square(torch.autograd.Function):

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        return y * y

    @staticmethod
    def backward(ctx, grad):
        (y, ) = ctx.saved_tensors
        return 2 * y * grad


def test_ffts_inside_custom_autograd_functions_are_counted():
    x = torch.randn(2, 6, 10, 4)
    apply = torch.autograd.Function.__dict__['apply']
    analyzer = build_flop_analyzer(
        Call(lambda t: _WrappedIrfft2.apply(_WrappedRfft2.apply(t), 10)).eval(), (x, ))
    with tracing_for_flops():
        counts = {op: FLOPS_PER_MAC * v for op, v in analyzer.by_operator().items()}
    one_transform = fft_cost(60, 8, real=True)
    assert counts == pytest.approx({'fft_rfft2': one_transform, 'fft_irfft2': one_transform})
    # Restored afterwards: Functions are recorded and differentiated as usual again.
    assert torch.autograd.Function.__dict__['apply'] is apply
    y = torch.randn(3, requires_grad=True)
    _Square.apply(y).sum().backward()
    assert torch.equal(y.grad, 2 * y.detach())


# Every mixer of the catalogue, each of its example cases (mixer_examples.example_cases).
MIXER_CASES = {case_id: (cls, kwargs) for case_id, cls, kwargs in example_cases()}
GRIDS = [(8, 8), (6, 10), (7, 5), (16, 12)]


@pytest.mark.parametrize('grid', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
@pytest.mark.parametrize('name', list(MIXER_CASES))
def test_traced_count_equals_analytic_flops(name, grid, monkeypatch):
    """The tracer's FFT handles count with the convention written out here (docs/flops.md), not
    with the ``fft_flops`` the mixers' ``flops()`` use: a wrong formula there fails."""
    monkeypatch.setattr(flops_module, 'fft_flops', lambda n, real=False: 0.0 if n <= 1 else (
        2.5 if real else 5.0) * n * math.log2(n))
    torch.manual_seed(0)
    cls, kwargs = MIXER_CASES[name]
    mixer = cls(**kwargs).eval()
    batch = 2
    counted = count_mixer_flops(mixer, grid, batch_size=batch)
    analytic = mixer.flops(grid)
    # Norm ops (ESA's reduction LayerNorm) are element-wise: mmengine estimates them, flops() not.
    traced_total = sum(v for op, v in counted.items() if op not in NORM_OPS)
    assert traced_total == pytest.approx(batch * sum(analytic.values()), rel=1e-9)
    traced_fft = sum(v for op, v in counted.items() if is_fft_op(op))
    assert traced_fft == pytest.approx(batch * analytic.get('fft', 0.0), rel=1e-9, abs=1e-9)
    if any(op == 'scaled_dot_product_attention' for op in counted):
        assert counted == count_mixer_flops(mixer, grid, batch, attention_stand_in=True)


@pytest.mark.parametrize('grid', [(16, 16), (12, 20), (33, 17)], ids=lambda g: f'{g[0]}x{g[1]}')
def test_afno25_mixer_cost_lower_by_the_kept_fraction_of_modes(grid):
    full = mixers.AFNOMixer(16, num_blocks=4)
    quarter = mixers.AFNOMixer(16, num_blocks=4, hard_thresholding_fraction=0.25)
    counted_full, counted_quarter = (count_mixer_flops(m, grid) for m in (full, quarter))
    fft = [sum(v for op, v in c.items() if is_fft_op(op)) for c in (counted_full, counted_quarter)]
    assert fft[0] == fft[1] > 0  # the transforms are the same
    kept = SpectralBand.fraction(grid, 0.25).num_modes / (grid[0] * (grid[1] // 2 + 1))
    gemm = [sum(v for op, v in c.items() if op in ('bmm', 'baddbmm', 'matmul', 'einsum'))
            for c in (counted_full, counted_quarter)]
    assert gemm[1] / gemm[0] == pytest.approx(kept, rel=1e-12)
    assert kept < 0.2  # both axes truncated (one axis alone would keep ~25%)


@pytest.fixture(scope='module')
def tiny_breakdown():
    get_flops = load_script('tools/analysis/get_flops.py')
    options = {'model.backbone.mixers': [
        dict(type='AFNOMixer', num_blocks=8, hard_thresholding_fraction=0.5),
        dict(type='GlobalFilterMixer'),
        dict(type='EfficientSelfAttentionMixer'),
        dict(type='FullSelfAttentionMixer')]}
    return get_flops.analyze_config(TINY_CONFIG, (64, 96), options)


def test_breakdown_rows_add_up_and_mixers_match_analytic(tiny_breakdown):
    result = tiny_breakdown
    rows = result['rows']
    assert sum(r['macs'] for r in rows) == pytest.approx(result['total']['macs'], rel=1e-9)
    assert sum(r['params'] for r in rows) == result['total']['params']
    assert all(r['flops'] == FLOPS_PER_MAC * r['macs'] for r in rows)
    assert [s['grid'] for s in result['stages'].values()] == [[16, 24], [8, 12], [4, 6], [2, 3]]
    by_key = {(r['group'], r['component']): r for r in rows}
    for stage in ('stage 1', 'stage 2', 'stage 3', 'stage 4'):
        for component in ('patch embedding', 'FFN', 'norms'):
            assert by_key[stage, component]['macs'] > 0
        for component in ('mixer: FFT', 'mixer: rest'):
            row = by_key[stage, component]
            assert row['flops'] == pytest.approx(row['analytic_flops'], rel=1e-9, abs=1e-9)
    assert set(by_key['stage 1', 'mixer: FFT']['ops']) == {'fft_rfft2', 'fft_irfft2'}
    assert set(by_key['stage 2', 'mixer: rest']['ops']) == {'complex_mul'}
    assert by_key['stage 3', 'mixer: FFT']['macs'] == 0
    assert 'scaled_dot_product_attention' in by_key['stage 4', 'mixer: rest']['ops']
    assert by_key['decode head', 'all']['macs'] > 0
    assert not any(is_fft_op(op) for op in result['unsupported_ops'])


def test_get_flops_tool_writes_json_and_markdown(tmp_path, capsys):
    get_flops = load_script('tools/analysis/get_flops.py')
    result = get_flops.main([TINY_CONFIG, '--shape', '64', '--out', str(tmp_path / 'tiny')])
    printed = capsys.readouterr().out
    assert '| stage 1: 16x16 tokens, 16 ch, 2 x AFNOMixer | patch embedding |' in printed
    assert 'GFLOPs = 2 x GMACs' in printed
    saved = json.loads((tmp_path / 'tiny.json').read_text())
    assert saved['total'] == result['total']
    assert saved['summary']['mixer_gflops'] == pytest.approx(
        saved['summary']['mixer_analytic_gflops'], rel=1e-9)
    assert (tmp_path / 'tiny.md').read_text().count('| **model** | **total** |') == 1


def test_mixer_table_tool_configs_and_sweep(tmp_path, capsys):
    mixer_table = load_script('tools/analysis/mixer_table.py')
    assert len(mixer_table.default_configs()) >= 7
    payload = mixer_table.main(['--configs', TINY_CONFIG, '--shape', '32', '64'])
    assert '| tiny_demo | AFNO |' in capsys.readouterr().out
    assert payload['results'][0]['image_hw'] == [32, 64]
    plot = tmp_path / 'sweep.png'
    payload = mixer_table.main(['--sweep', '--sizes', '16', '24', '--channels', '16',
                                '--plot', str(plot), '--out', str(tmp_path / 'sweep')])
    records = payload['records']
    assert len(records) == 2 * len(stage1_labels())
    for record in records:
        assert record['counted_gflops'] == pytest.approx(record['analytic_gflops'], rel=1e-9)
    assert plot.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert '| full self-attention |' in (tmp_path / 'sweep.md').read_text()


# --------------------------------------------- the spectral mixers' FFTs, counted as they run
class ShapeCounter(TorchDispatchMode):
    """Counts FLOPs of the FFT and matmul ops that actually run, from their tensor shapes."""

    def __init__(self):
        super().__init__()
        self.fft = self.matmul = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__
        if name.startswith(('_fft_r2c', '_fft_c2r', '_fft_c2c')):
            signal, dims = args[0], args[1]
            sizes = [signal.shape[d] for d in dims]
            if name.startswith('_fft_c2r'):
                sizes[-1] = args[3]  # the real output length of the last dimension
            points = math.prod(sizes)
            transforms = signal.numel() // math.prod(signal.shape[d] for d in dims)
            per_point = 5.0 if name.startswith('_fft_c2c') else 2.5
            self.fft += transforms * per_point * points * math.log2(points)
        elif name.startswith(('mm', 'bmm', 'baddbmm', 'addmm')):
            with_bias = name.startswith(('baddbmm', 'addmm'))
            first, second = (args[1], args[2]) if with_bias else args[:2]
            macs = math.prod(first.shape) * second.shape[-1]
            self.matmul += 2 * macs * (4 if first.is_complex() else 1)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('build, matmul_key, fft_scale', [
    (lambda: AFNOMixer(16, num_blocks=4, hidden_size_factor=2), 'mlp', 1.0),
    (lambda: AFNOMixer(16, num_blocks=4, hard_thresholding_fraction=0.4), 'mlp', 1.0),
    (lambda: FNOMixer(16, modes=(3, 4)), 'spectral_weights', 1.0),
    (lambda: GlobalFilterMixer(16, base_hw_shape=(8, 8)), None, 1.0),
    # torch runs fftn of a real tensor as a c2c transform of its complex copy (5 N log2 N); the
    # convention counts the real-input transform it computes at 2.5 N log2 N.
    (lambda: FNetMixer(16), None, 0.5),
], ids=['afno', 'afno-truncated', 'fno', 'gfn', 'fnet'])
def test_analytic_flops_match_counted_ops(build, matmul_key, fft_scale):
    mixer, batch, hw = build(), 2, (7, 9)
    counter = ShapeCounter()
    with counter, torch.no_grad(), use_form('reference'):  # fast forms are opaque custom ops
        mixer(torch.randn(batch, hw[0] * hw[1], 16, generator=torch.Generator().manual_seed(0)), hw)
    analytic = mixer.flops(hw)
    assert analytic.get('fft', 0.0) == pytest.approx(fft_scale * counter.fft / batch)
    assert analytic.get(matmul_key, 0.0) == pytest.approx(counter.matmul / batch)
