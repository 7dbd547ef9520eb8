"""A new mixer is one file and one import line: ``docs/adding_a_mixer.md`` followed to the
letter, in a copy.

The package is copied to a temporary folder, the page's example module is written into the
copy's ``afno_seg/mixers/`` with the page's import line; the project's own suites and tools then
run on the copy (one interpreter for all the tools, one for the suites): the new mixer is
registered, built in MiT and ViT, put through the contract suite, FLOP-checked, benchmarked,
listed and written as a base config exactly as the page shows. Also: the mixers package never
imports a backbone, and the table of docs/mixers.md is the catalogue's.
"""
import ast
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from afno_seg.mixers import catalogue_markdown, mixer_catalogue, mixer_variants
from afno_seg.mixers.catalogue import base_config_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / 'docs' / 'adding_a_mixer.md'
NEW_CLASS, NEW_VARIANT = 'LocalConvMixer', 'local3'
TOOLS = ROOT / 'tools' / 'analysis'

# Run in the copy: every tool's main() in one interpreter, outputs gathered as JSON.
TOOLS_SCRIPT = '''
import contextlib, io, json, runpy, sys
import afno_seg, afno_seg.mixers as m
out = {'file': afno_seg.__file__, 'variant': repr(m.mixer_variants()[NEW_VARIANT])}
def run(name, *argv):
    sys.argv = [name, *argv]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            runpy.run_path(f'{TOOLS}/{name}', run_name='__main__')
        except SystemExit as exit_:
            assert not exit_.code, (name, exit_.code, buffer.getvalue())
    return buffer.getvalue()
out['table'] = run('list_mixers.py')
run('list_mixers.py', '--write-configs', OUT)
out['sweep'] = run('mixer_table.py', '--sweep', '--sizes', '8', '16', '--channels', '16',
                   '--out', f'{OUT}/sweep')
run('benchmark_mixers.py', '--quick', '--mixers', NEW_VARIANT, 'esa', '--references', 'fft',
    '--dtypes', 'fp32', '--stages', '1', '--no-plot', '--out', f'{OUT}/bench')
print(json.dumps(out))
'''


def doc_code_blocks() -> list[str]:
    return re.findall(r'```python\n(.*?)```', DOC.read_text(), flags=re.S)


@pytest.fixture(scope='module')
def package_with_new_mixer(tmp_path_factory) -> Path:
    """A copy of afno_seg with the page's example module and import line; the folder to put on
    the path."""
    site = tmp_path_factory.mktemp('site')
    shutil.copytree(ROOT / 'afno_seg', site / 'afno_seg',
                    ignore=shutil.ignore_patterns('__pycache__'))
    blocks = doc_code_blocks()
    module = next(block for block in blocks if f'class {NEW_CLASS}' in block)
    (site / 'afno_seg' / 'mixers' / 'local_conv.py').write_text(module)
    line = next(block for block in blocks if block.startswith('from .local_conv import'))
    init = site / 'afno_seg' / 'mixers' / '__init__.py'
    init.write_text(init.read_text() + line)
    return site


def run_in(site: Path, *args, timeout=900) -> subprocess.CompletedProcess:
    """Run python with the copy first on the path, from the copy's folder (so that neither the
    repository's own ``afno_seg`` nor its editable install is imported)."""
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, *args], cwd=site, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope='module')
def tools_on_the_copy(package_with_new_mixer, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp('tools')
    script = (f'NEW_VARIANT, TOOLS, OUT = {NEW_VARIANT!r}, {str(TOOLS)!r}, {str(out)!r}\n'
              + TOOLS_SCRIPT)
    result = run_in(package_with_new_mixer, '-c', script)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), out


def test_the_copy_is_what_runs(package_with_new_mixer, tools_on_the_copy):
    outputs, _ = tools_on_the_copy
    assert outputs['file'].startswith(str(package_with_new_mixer))
    assert outputs['variant'] == repr(dict(type=NEW_CLASS, kernel_size=3))


def test_the_page_config_is_what_the_tool_writes(tools_on_the_copy):
    _, out = tools_on_the_copy
    page = next(block for block in doc_code_blocks() if f'{NEW_VARIANT}_mixer =' in block)
    assert (out / f'{NEW_VARIANT}.py').read_text() == page
    scope: dict = {}
    exec(page, scope)  # noqa: S102  (the page's own config)
    assert scope[f'{NEW_VARIANT}_mixer'] == dict(type=NEW_CLASS, kernel_size=3)


def test_the_tools_list_and_benchmark_the_new_mixer(tools_on_the_copy):
    outputs, out = tools_on_the_copy
    assert f'| `{NEW_VARIANT}` | local 3x3 convolution | `{NEW_CLASS}` |' in outputs['table']
    row = next(line for line in outputs['sweep'].splitlines() if 'local 3x3 convolution' in line)
    analytic, counted = row.split('|')[2].split('/')
    assert float(analytic) == float(counted) > 0  # traced == analytic in the table
    with open(out / 'bench' / 'mixers_cpu.csv') as f:
        rows = {row['name']: row for row in csv.DictReader(f)}
    assert rows[NEW_VARIANT]['status'] == 'ok' and float(rows[NEW_VARIANT]['median_ms']) > 0
    assert rows[NEW_VARIANT]['gflop_fwd']


@pytest.mark.slow
def test_the_project_suites_cover_the_new_mixer(package_with_new_mixer):
    suites = ['test_mixer_contract.py', 'test_flops.py', 'test_backbone.py', 'test_mmpretrain.py']
    result = run_in(package_with_new_mixer, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                    '--rootdir', str(ROOT), '-k', f'{NEW_CLASS} or {NEW_VARIANT}',
                    *[str(ROOT / 'tests' / name) for name in suites])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    passed = int(re.search(r'(\d+) passed', output).group(1))
    # contract: 2 grids, batch, 2 registries, bf16, FLOPs, its variant at a stage (8); traced
    # FLOPs on 4 grids; MiT on 2 inputs; ViT (1).
    assert passed >= 15, output[-3000:]
    assert 'failed' not in output and 'error' not in output.lower().split('passed')[-1]


def test_mixers_import_no_backbone():
    """Mixers are a layer below the backbones (which build them, ``backbones/stage.py``)."""
    for path in sorted((ROOT / 'afno_seg' / 'mixers').glob('*.py')):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = '.' * node.level + (node.module or '')
                # the project's backbones; another library's modules (mmseg's MSCA) are a layer
                own = node.level or target.startswith('afno_seg')
                assert not (own and 'backbones' in target), f'{path.name} imports {target}'
            elif isinstance(node, ast.Import):
                assert not any(alias.name.startswith('afno_seg.backbones')
                               for alias in node.names), path.name


def test_mixer_table_of_docs_and_base_configs_are_the_catalogue():
    readme = (ROOT / 'docs' / 'mixers.md').read_text()
    block = readme.split('<!-- mixer-catalogue:begin -->\n')[1].split('<!-- mixer-catalogue:end')[0]
    assert block == catalogue_markdown(), (
        'docs/mixers.md: the mixer table is out of date; run python tools/analysis/list_mixers.py '
        '--update docs/mixers.md')
    assert set(mixer_variants()) <= set(re.findall(r'^\| `([^`]+)`', block, flags=re.M))
    bases = ROOT / 'configs' / '_base_' / 'mixers'
    assert sorted(p.stem for p in bases.glob('*.py')) == sorted(mixer_variants())
    for entry in mixer_catalogue():
        assert (bases / f'{entry.name}.py').read_text() == base_config_text(entry), (
            f'{bases}/{entry.name}.py is out of date; run python tools/analysis/list_mixers.py '
            f'--write-configs {bases.relative_to(ROOT)}')
