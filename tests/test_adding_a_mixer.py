"""A new mixer is one file: ``docs/adding_a_mixer.md`` followed to the letter, in a copy.

The package is copied to a temporary folder, the page's example module is written into the
copy's ``afno_seg/mixers/`` as a new file (nothing else is edited), and the project's own test
suites and tools then run on the copy: the new mixer is registered in both registries, built in
MiT and ViT, put through the contract suite, FLOP-checked, benchmarked and listed in the tables.
Also: the mixers package never imports a backbone, and the README's table is the catalogue's.
"""
import ast
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from afno_seg.mixers import catalogue_markdown, mixer_variants

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / 'docs' / 'adding_a_mixer.md'
NEW_CLASS, NEW_VARIANT = 'LocalConvMixer', 'local3'


def doc_code_blocks() -> list[str]:
    return re.findall(r'```python\n(.*?)```', DOC.read_text(), flags=re.S)


@pytest.fixture(scope='module')
def package_with_new_mixer(tmp_path_factory) -> Path:
    """A copy of afno_seg with the page's example module added; the folder to put on the path."""
    site = tmp_path_factory.mktemp('site')
    shutil.copytree(ROOT / 'afno_seg', site / 'afno_seg',
                    ignore=shutil.ignore_patterns('__pycache__'))
    module = next(block for block in doc_code_blocks() if f'class {NEW_CLASS}' in block)
    (site / 'afno_seg' / 'mixers' / 'local_conv.py').write_text(module)
    return site


def run_in(site: Path, *args, timeout=900) -> subprocess.CompletedProcess:
    """Run python with the copy first on the path, from the copy's folder (so that neither the
    repository's own ``afno_seg`` nor its editable install is imported)."""
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, *args], cwd=site, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_copy_is_what_runs(package_with_new_mixer):
    result = run_in(package_with_new_mixer, '-c',
                    'import afno_seg, afno_seg.mixers as m; print(afno_seg.__file__); '
                    f'print(m.mixer_variants()["{NEW_VARIANT}"])')
    assert result.returncode == 0, result.stderr[-3000:]
    path, variant = result.stdout.strip().splitlines()[-2:]
    assert path.startswith(str(package_with_new_mixer))
    assert variant == str(dict(type=NEW_CLASS, kernel_size=3))


@pytest.mark.slow
def test_the_project_suites_cover_the_new_mixer(package_with_new_mixer):
    suites = ['test_mixer_contract.py', 'test_flops.py', 'test_backbone.py', 'test_mmpretrain.py']
    result = run_in(package_with_new_mixer, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                    '--rootdir', str(ROOT), '-k', f'{NEW_CLASS} or {NEW_VARIANT}',
                    *[str(ROOT / 'tests' / name) for name in suites])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    passed = int(re.search(r'(\d+) passed', output).group(1))
    # contract: declarations, 3 grids, batch, determinism, 2 registries, bf16, FLOP growth,
    # its variant at a stage (10); traced FLOPs on 4 grids; MiT on 2 inputs; ViT (1).
    assert passed >= 17, output[-3000:]
    assert 'failed' not in output and 'error' not in output.lower().split('passed')[-1]


@pytest.mark.slow
def test_the_tools_list_and_benchmark_the_new_mixer(package_with_new_mixer, tmp_path):
    site = package_with_new_mixer
    table = run_in(site, str(ROOT / 'tools' / 'analysis' / 'list_mixers.py'))
    assert table.returncode == 0, table.stderr[-3000:]
    assert f'| `{NEW_VARIANT}` | local 3x3 convolution | `{NEW_CLASS}` |' in table.stdout
    sweep = run_in(site, str(ROOT / 'tools' / 'analysis' / 'mixer_table.py'), '--sweep',
                   '--sizes', '8', '16', '--channels', '16', '--out', str(tmp_path / 'sweep'))
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    row = next(line for line in sweep.stdout.splitlines() if 'local 3x3 convolution' in line)
    analytic, counted = row.split('|')[2].split('/')
    assert float(analytic) == float(counted) > 0  # traced == analytic in the table
    bench = run_in(site, str(ROOT / 'tools' / 'analysis' / 'benchmark_mixers.py'), '--quick',
                   '--mixers', NEW_VARIANT, 'esa', '--references', 'fft', '--dtypes', 'fp32',
                   '--stages', '1', '--no-plot', '--out', str(tmp_path / 'bench'))
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-3000:]
    with open(tmp_path / 'bench' / 'mixers_cpu.csv') as f:
        rows = {row['name']: row for row in csv.DictReader(f)}
    assert rows[NEW_VARIANT]['status'] == 'ok' and float(rows[NEW_VARIANT]['median_ms']) > 0
    assert rows[NEW_VARIANT]['gflop_fwd']


def test_the_page_config_matches_the_variant(package_with_new_mixer):
    base = next(block for block in doc_code_blocks() if block.startswith(f'{NEW_VARIANT}_mixer'))
    scope: dict = {}
    exec(base, scope)  # noqa: S102  (the page's own three-line config)
    result = run_in(package_with_new_mixer, '-c',
                    f'import afno_seg.mixers as m; print(m.mixer_variants()["{NEW_VARIANT}"])')
    assert result.stdout.strip() == str(scope[f'{NEW_VARIANT}_mixer'])


def test_mixers_import_no_backbone():
    """Mixers are a layer below the backbones: the ViT and the analysis build mixers without
    importing a backbone."""
    for path in sorted((ROOT / 'afno_seg' / 'mixers').glob('*.py')):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = '.' * node.level + (node.module or '')
                assert 'backbones' not in target, f'{path.name} imports {target}'
            elif isinstance(node, ast.Import):
                assert not any('backbones' in alias.name for alias in node.names), path.name


def test_readme_mixer_table_is_the_catalogue():
    readme = (ROOT / 'README.md').read_text()
    block = readme.split('<!-- mixer-catalogue:begin -->\n')[1].split('<!-- mixer-catalogue:end')[0]
    assert block == catalogue_markdown(), (
        'README.md: the mixer table is out of date; run python tools/analysis/list_mixers.py '
        '--update README.md')
    assert set(mixer_variants()) <= set(re.findall(r'^\| `([^`]+)`', block, flags=re.M))
