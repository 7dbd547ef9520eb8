"""The documented examples that are cheap on a CPU run as written.

A fenced block right after the line ``<!-- docs-test: run -->`` in README.md or docs/ is run by
bash, line for line, in a temporary working copy: ``tools/`` and ``configs/`` copied, ``data/`` and
``work_dirs/`` empty, ``python`` the interpreter running the tests, ``afno_seg`` the package of
this checkout. The block must succeed with no traceback, write only under ``data/`` and
``work_dirs/`` (a page's command never overwrites the page's own files), and its last line must
name a result that exists under ``work_dirs/``. Every other block stays
parsed only (tests/test_docs.py). Cost: the marked blocks' own run time (see the pages).

A block after ``<!-- docs-test: run on the Slurm test cluster -->`` runs the same way, with the
same checks, in tests/test_slurm.py, on the cluster that module starts (root and Slurm needed).
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

MARKER = '<!-- docs-test: run -->'
SLURM_MARKER = '<!-- docs-test: run on the Slurm test cluster -->'
PAGES = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
OUTPUT_DIRS = {'data', 'work_dirs'}
COPIED = ('tools', 'configs')


def marked_blocks(marker: str = MARKER) -> list[tuple[str, str]]:
    """(page:line, block text) of every block marked with ``marker``."""
    blocks, block_re = [], re.compile(re.escape(marker) + r'\n```(?:bash|sh)?\n(.*?)^```',
                                      re.M | re.S)
    for page in PAGES:
        text = page.read_text()
        for match in block_re.finditer(text):
            line = text.count('\n', 0, match.start()) + 1
            blocks.append((f'{page.relative_to(ROOT)}:{line}', match.group(1)))
    return blocks


def working_copy(folder: Path) -> dict:
    """A scratch repository root in ``folder`` and the environment to run a page's lines in."""
    for name in COPIED:
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns('__pycache__'))
    (folder / 'data').mkdir()
    shims = folder.parent / f'{folder.name}_bin'
    shims.mkdir()
    for name in ('python', 'python3'):  # the pages say `python`; a venv's symlink would lose it
        (shims / name).write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        (shims / name).chmod(0o755)
    return dict(os.environ, PATH=f'{shims}{os.pathsep}{os.environ["PATH"]}', PYTHONPATH=str(ROOT),
                OMP_NUM_THREADS='1', PYTHONDONTWRITEBYTECODE='1')


def written_outside(folder: Path, since: float) -> list[str]:
    """Files the run created or changed anywhere but under data/ and work_dirs/."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob('*')
                  if path.is_file() and path.relative_to(folder).parts[0] not in OUTPUT_DIRS
                  and path.stat().st_mtime >= since)


@pytest.mark.parametrize('where,block', marked_blocks(), ids=[w for w, _ in marked_blocks()])
def test_marked_example_runs_as_written(where, block, tmp_path):
    run_as_written(where, block, tmp_path)


def run_as_written(where: str, block: str, tmp_path: Path, **variables: str) -> str:
    """Run ``block`` in a working copy under ``tmp_path`` (``variables`` added to its
    environment) and check what the module's docstring says; returns the output."""
    folder = tmp_path / 'repo'
    folder.mkdir()
    env = {**working_copy(folder), **variables}
    since = time.time() - 1  # copies keep their files' times (copy2)
    before = checkout_outputs()
    result = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', block], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f'{where} failed:\n{output[-4000:]}'
    assert 'Traceback' not in output, f'{where}:\n{output[-4000:]}'
    assert not written_outside(folder, since), (
        f'{where} wrote outside data/ and work_dirs/: {written_outside(folder, since)}')
    last = result.stdout.strip().splitlines()[-1]  # every run ends by saying where its results are
    named = [path for path in re.findall(r'[\w./-]*work_dirs/[\w./-]*\w', last)
             if (folder / path).exists()]
    assert named, f'{where}: the last line names no result under work_dirs/: {last!r}'
    # A tool that ignores the working directory would write into this checkout instead.
    new = [path for path in checkout_outputs() - before if Path(path).name in block]
    assert not new, f'{where} wrote into the checkout, not the working directory: {new}'
    return output


def checkout_outputs() -> set[str]:
    """The entries of this checkout's own data/ and work_dirs/."""
    return {str(path) for name in OUTPUT_DIRS if (ROOT / name).is_dir()
            for path in (ROOT / name).iterdir()}


def test_the_marker_finds_blocks_and_a_broken_example_fails(tmp_path):
    """Negative control: the pages mark at least one block; a block that fails, or that writes
    into a copied tree, fails the checks above."""
    assert marked_blocks(), f'no {MARKER} block in README.md or docs/'
    folder = tmp_path / 'repo'
    folder.mkdir()
    env = working_copy(folder)
    since = time.time() - 1
    failed = subprocess.run(['bash', '-e', '-c', 'python -c "raise SystemExit(3)"\ntrue'],
                            cwd=folder, env=env, capture_output=True)
    assert failed.returncode == 3
    subprocess.run(['bash', '-e', '-c', 'mkdir -p docs && python -c "open(\'docs/x.png\', \'w\')"'],
                   cwd=folder, env=env, check=True)
    assert written_outside(folder, since) == ['docs/x.png']
