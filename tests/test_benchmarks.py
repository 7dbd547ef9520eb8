"""The benchmark harnesses (quick modes, outputs, memory accounting, the GPU script's arguments)
and the fast paths they measure (fused AFNO, the FFT helpers' adjoint backward), checked against
plain-torch references. No timing assertions: times are only checked to be measured (> 0).
"""
import csv
import math
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from afno_seg.experiments import benchmarking
from afno_seg.experiments.mixer_benchmark import B3_STAGES, flop_exponent
from afno_seg.mixers import AFNOMixer, GlobalFilterMixer, use_form
from afno_seg.mixers.fast.transforms import (
    hermitian_column_weight,
    spectrum_to_grid,
    tokens_to_spectrum,
    transposed_copy,
)

from conftest import load_script
from mixer_examples import o1_branch, relative_error

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
benchmark_mixers = load_script('tools/analysis/benchmark_mixers.py')
benchmark_model = load_script('tools/analysis/benchmark_model.py')

GPU_SCRIPT = osp.join(ROOT, 'tools', 'analysis', 'gpu_benchmarks.sh')


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------- fast paths vs torch
@pytest.mark.parametrize('hw', [(5, 6), (4, 7), (3, 1), (2, 2), (6, 9)])
def test_fft_helpers_backward_is_torch_autograd(hw):
    """The adjoint backward of the FFT helpers equals torch.fft's own, to float64 round-off,
    and is itself differentiable."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, hw[0] * hw[1], 3, dtype=torch.float64, generator=generator,
                    requires_grad=True)
    spectrum = tokens_to_spectrum(x, hw)
    reference = torch.fft.rfft2(x.view(2, *hw, 3), dim=(1, 2), norm='ortho').permute(0, 3, 1, 2)
    torch.testing.assert_close(spectrum, reference, atol=1e-12, rtol=0)
    grad = torch.randn(spectrum.shape, dtype=torch.complex128, generator=generator)
    torch.testing.assert_close(torch.autograd.grad(spectrum, x, grad)[0],
                               torch.autograd.grad(reference, x, grad)[0], atol=1e-12, rtol=0)
    modes = torch.randn(spectrum.shape, dtype=torch.complex128, generator=generator,
                        requires_grad=True)
    grid = spectrum_to_grid(modes, hw)
    reference = torch.fft.irfft2(modes, s=hw, norm='ortho').permute(0, 2, 3, 1)
    torch.testing.assert_close(grid, reference, atol=1e-12, rtol=0)
    assert grid.is_contiguous()
    grad = torch.randn(grid.shape, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(torch.autograd.grad(grid, modes, grad)[0],
                               torch.autograd.grad(reference, modes, grad)[0], atol=1e-12, rtol=0)


def test_fft_helpers_are_twice_differentiable():
    hw = (3, 4)
    x = torch.randn(1, 12, 1, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(1, 1, 3, 3, dtype=torch.complex128)
    round_trip = lambda t: spectrum_to_grid(tokens_to_spectrum(t, hw) * weight, hw)  # noqa: E731
    assert torch.autograd.gradgradcheck(round_trip, (x,), fast_mode=True)


def test_hermitian_column_weight():
    assert hermitian_column_weight(6).tolist() == [1.0, 0.5, 0.5, 1.0]
    assert hermitian_column_weight(7).tolist() == [1.0, 0.5, 0.5, 0.5]
    assert hermitian_column_weight(1).tolist() == [1.0]
    assert hermitian_column_weight(8, 2).tolist() == [1.0, 0.5]


def test_transposed_copy_matches_permute():
    x = torch.randn(3, 70, 65)
    out = transposed_copy(x)
    assert out.is_contiguous() and torch.equal(out, x.transpose(1, 2))
    strided = torch.randn(70, 3, 65).transpose(0, 1)  # non-contiguous input still right
    assert torch.equal(transposed_copy(strided), strided.transpose(1, 2))


def test_fast_custom_ops_pass_opcheck():
    """The fast forms' ``torch.library`` ops: fake kernels (shapes and strides, which a compiled
    graph asserts), schemas and autograd registrations agree with the eager kernels."""
    generator = torch.Generator().manual_seed(0)
    hw, band = [5, 6], [5, 6, 2, 1, 3]  # (H, W, low rows, high rows, columns)
    x = torch.randn(2, 30, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    spectrum = torch.randn(2, 4, 5, 4, dtype=torch.complex128, generator=generator,
                           requires_grad=True)
    weights = [torch.randn(shape, dtype=torch.float64, generator=generator, requires_grad=True)
               for shape in [(2, 2, 2, 4), (2, 2, 4), (2, 2, 4, 2), (2, 2, 2)]]
    fno_weight = torch.randn(9, 4, 4, dtype=torch.complex128, generator=generator,
                             requires_grad=True)  # (band's modes, C, C)
    ops = torch.ops.afno_seg
    for op, args in [(ops.tokens_to_spectrum, (x, hw)), (ops.spectrum_to_grid, (spectrum, hw)),
                     (ops.fused_afno, (x, *weights, band, 0.01)), (ops.fno, (x, fno_weight, band))]:
        torch.library.opcheck(op, args, test_utils=('test_faketensor',
                                                    'test_aot_dispatch_dynamic'))


def fused_and_composed(mixer, x, hw, params):
    """``[(out, grads of x and params)]`` in the ``fast`` form, then the ``reference`` one; the
    same random output gradient (seed 1) for both."""
    grad = torch.randn(*x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(1))
    results = []
    for form in ('fast', 'reference'):
        with use_form(form):
            out = mixer(x, hw)
            results.append((out, torch.autograd.grad(out, [x, *params], grad)))
    return results


@pytest.mark.parametrize('hw', [(6, 8), (5, 7), (4, 1)])
@pytest.mark.parametrize('fraction, factor', [(1.0, 1), (1.0, 2), (0.5, 1), (0.25, 2)])
def test_fused_afno_equals_composed(hw, fraction, factor):
    """The hand-written backward of the fused AFNO gives the composed path's output and every
    gradient (input and all four parameters), odd/even grids, truncation, hidden factor 2."""
    torch.manual_seed(0)
    mixer = AFNOMixer(8, num_blocks=2, hidden_size_factor=factor,
                      hard_thresholding_fraction=fraction).double()
    with torch.no_grad():  # O(1) weights: ReLU and shrink masks neither all-on nor all-off
        for param in mixer.parameters():
            param.mul_(20.0)
    x = torch.randn(2, hw[0] * hw[1], 8, dtype=torch.float64, requires_grad=True)
    (out, grads), (ref_out, ref_grads) = fused_and_composed(mixer, x, hw, list(mixer.parameters()))
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=1e-10)
    for name, got, expected in zip(['x', 'w1', 'b1', 'w2', 'b2'], grads, ref_grads):
        assert got.shape == expected.shape, name
        torch.testing.assert_close(got, expected, atol=1e-11, rtol=1e-9, msg=name)
    assert all(g.abs().sum() > 0 for g in grads)


def test_fused_afno_backward_twice_with_retained_graph():
    torch.manual_seed(0)
    mixer, hw = AFNOMixer(16, num_blocks=4), (6, 5)
    x = torch.randn(2, 30, 16, requires_grad=True)
    out = mixer(x, hw)
    first = torch.autograd.grad(out.sum(), [x, *mixer.parameters()], retain_graph=True)
    second = torch.autograd.grad(out.sum(), [x, *mixer.parameters()])
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_fused_afno_gradients_only_where_asked_and_under_autocast():
    """Parameters get gradients when x does not ask for one. Under bf16 autocast the fused form
    runs in float32 (the island): against float32 on the same bf16 tokens only the output's
    rounding remains (measured 0.17% L2), within 0.5%; the spectral branch is O(1) of the
    output (``o1_branch``), so a forward returning its residual alone fails."""
    torch.manual_seed(0)
    mixer, hw = o1_branch(AFNOMixer(16, num_blocks=4)), (6, 5)
    x = torch.randn(2, 30, 16)
    out = mixer(x, hw)  # x without grad: parameters still get theirs
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mixer.parameters())
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, hw), out.detach())
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = mixer(x.bfloat16(), hw)
        reference = mixer(x.bfloat16().float(), hw)
    assert low.dtype == torch.bfloat16
    assert relative_error(low, reference) < 0.005, relative_error(low, reference)
    assert relative_error(x, reference) > 0.05


# ------------------------------------------------------------------------- harness pieces
def test_fit_exponent_recovers_power_law():
    tokens = [64**2, 128**2, 256**2]
    for power in (1.0, 1.13, 2.0):
        seconds = [3e-9 * n**power for n in tokens]
        assert benchmarking.fit_exponent(tokens, seconds) == pytest.approx(power)
    assert math.isnan(benchmarking.fit_exponent([10], [1.0]))


def test_paired_ratio_uses_rounds_in_pairs():
    # The numerator is always twice the denominator in the same round, whatever the load.
    median, low, high = benchmarking.paired_ratio([2.0, 8.0, 4.0], [1.0, 4.0, 2.0])
    assert (median, low, high) == (2.0, 2.0, 2.0)


def test_predict_extrapolates_local_slope():
    history = [(100, 1.0), (400, 4.0)]  # linear so far
    assert benchmarking.predict(history, 1600) == pytest.approx(16.0)
    assert benchmarking.predict([(100, 1.0)], 400, first_slope=2.0) == pytest.approx(16.0)
    assert benchmarking.predict([], 400, first_slope=2.0) == 0.0


def test_first_guess_of_the_growth_is_the_analytic_flop_exponent():
    """Before two grids are measured, time is extrapolated with the FLOP exponent: full
    attention quadratic, the Fourier mixers N log N, efficient attention in between."""
    stage = B3_STAGES[0]
    assert flop_exponent('sa', stage, 64) == pytest.approx(2.0, abs=0.05)
    assert 1.0 <= flop_exponent('afno', stage, 64) < 1.15
    assert 1.0 <= flop_exponent('fnet', stage, 64) < 1.15


def test_cpu_memory_sees_torch_allocations():
    """held = what the forward saves for backward (here its output, 4 MB); peak >= held."""
    x = torch.randn(1024, 1024, requires_grad=True)
    candidate = benchmarking.Candidate('exp', lambda: x.exp(), [x], torch.ones(1024, 1024))
    peak, held = benchmarking.measure_memory(candidate, 'cpu')
    assert held == pytest.approx(4 * 2**20, rel=0.01)
    assert peak >= held + 4 * 2**20  # plus at least the input gradient


def test_mixer_benchmark_quick(tmp_path):
    code = benchmark_mixers.main(['--quick', '--out', str(tmp_path), '--dtypes', 'fp32', 'bf16',
                                  '--stages', '1', '4', '--mixers', 'afno', 'afno25', 'gfn',
                                  'fnet', 'esa', 'sa', 'axial'])
    assert code == 0
    rows = read_csv(tmp_path / 'mixers_cpu.csv')
    names = {'afno', 'afno25', 'gfn', 'fnet', 'esa', 'sa', 'axial', 'fft', 'fft-torch', 'matmul',
             'matmul-complex', 'copy'}
    assert {r['name'] for r in rows} == names
    assert len(rows) == len(names) * 2 * 2 * 2  # names x dtypes x stages x grids
    assert all(r['status'] == 'ok' for r in rows)
    assert all(float(r['median_ms']) > 0 and float(r['peak_mb']) > 0 for r in rows)
    assert {(r['stage'], r['channels']) for r in rows} == {('1', '8'), ('4', '64')}
    report = (tmp_path / 'mixers_cpu.md').read_text()
    assert 'afno/floor' in report and 'esa/afno' in report and 'Scaling exponents' in report
    for dtype in ('fp32', 'bf16'):
        assert (tmp_path / f'mixers_cpu_{dtype}.png').stat().st_size > 1000


def test_mixer_benchmark_skips_predicted_slow_points(tmp_path):
    code = benchmark_mixers.main(['--quick', '--out', str(tmp_path), '--dtypes', 'fp32',
                                  '--stages', '2', '--mixers', 'afno', '--references', 'fft',
                                  '--grids', '4', '8', '--max-call-s', '1e-9', '--no-plot',
                                  '--no-memory'])
    assert code == 0
    status = {(r['name'], r['grid']): r['status'] for r in read_csv(tmp_path / 'mixers_cpu.csv')}
    assert status[('afno', '4')] == 'ok' and status[('fft', '4')] == 'ok'
    assert status[('afno', '8')].startswith('skipped: predicted')


def test_mixer_benchmark_plots_without_memory(tmp_path):
    """--no-memory leaves peak MB at 0: the plot has no memory panel (log axis of zeros)."""
    code = benchmark_mixers.main(['--quick', '--out', str(tmp_path), '--dtypes', 'fp32',
                                  '--stages', '1', '--mixers', 'gfn', 'gfn-composed',
                                  '--references', 'fft', '--no-memory'])
    assert code == 0
    assert (tmp_path / 'mixers_cpu_fp32.png').stat().st_size > 1000
    assert 'gfn-composed/gfn' in (tmp_path / 'mixers_cpu.md').read_text()


def test_model_benchmark_quick(tmp_path):
    configs = [osp.join(ROOT, 'configs', f'segformer_{name}_b3_cityscapes.py')
               for name in ('afno', 'esa')]
    code = benchmark_model.main(['--quick', '--out', str(tmp_path), '--configs', *configs,
                                 '--heads', 'stock', 'low-res'])
    assert code == 0
    rows = read_csv(tmp_path / 'models_cpu.csv')
    assert [r['config'] for r in rows] == [
        osp.basename(c) + suffix for c in configs for suffix in ('', '+low-res-head')]
    assert rows[0]['params_m'] == rows[1]['params_m']  # the same head's parameters
    for row in rows:
        assert row['status'] == 'ok'
        assert float(row['train_s']) > 0 and float(row['infer_img_s']) > 0
        assert float(row['step_peak_mb']) > 0 and float(row['state_mb']) > 0
    assert 'step / ESA step' in (tmp_path / 'models_cpu.md').read_text()


# ------------------------------------------------------------------------- the GPU script
@pytest.mark.parametrize('args', [[], ['out', '--bogus'], ['out', '--dry-run', 'extra'],
                                  ['--dry-run']])
def test_gpu_script_rejects_bad_arguments(args):
    result = subprocess.run(['bash', GPU_SCRIPT, *args], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 64 and 'usage' in result.stderr


@pytest.mark.slow
def test_gpu_script_dry_run(tmp_path):
    result = subprocess.run(['bash', GPU_SCRIPT, str(tmp_path / 'out'), '--dry-run'],
                            capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                            env=dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1'))
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / 'out'
    summary = (out / 'summary.txt').read_text()
    assert summary.count('status: 0') == 4, summary
    for name in ('mixers_cpu.csv', 'mixers_cpu.md', 'models_cpu_fp32.csv', 'models_cpu_fp32.md',
                 'step_memory.csv', 'gpu_check/gpu_check_b3.csv', 'env.txt'):
        assert (out / name).stat().st_size > 0, name


@pytest.mark.parametrize('hw, base', [((6, 8), (6, 8)), ((5, 7), (5, 7)), ((4, 1), (4, 1)),
                                      ((6, 10), (4, 6))])
def test_fused_gfn_equals_composed(hw, base):
    """GFN's written-out backward gives the composed path's output and both gradients, also
    when the filter is resampled from another grid."""
    torch.manual_seed(0)
    mixer = GlobalFilterMixer(6, base_hw_shape=base).double()
    x = torch.randn(3, hw[0] * hw[1], 6, dtype=torch.float64, requires_grad=True)
    (out, grads), (ref_out, ref_grads) = fused_and_composed(mixer, x, hw, [mixer.complex_weight])
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=1e-10)
    for name, got, expected in zip(['x', 'complex_weight'], grads, ref_grads):
        torch.testing.assert_close(got, expected, atol=1e-11, rtol=1e-9, msg=name)
        assert got.abs().sum() > 0, name
    # the fast form, the filter alone: no gradient for x asked, none computed
    grad = torch.randn(*x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (only_filter,) = torch.autograd.grad(mixer(x.detach(), hw), [mixer.complex_weight], grad)
    torch.testing.assert_close(only_filter, ref_grads[1], atol=1e-11, rtol=1e-9)
