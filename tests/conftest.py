"""Shared fixtures: a tiny generated demo dataset and a runner for the tools as subprocesses."""
import glob
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from afno_seg.datasets.demo_dataset import generate as generate_demo_data

ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = str(ROOT / 'tests' / 'configs' / 'tiny_demo.py')


def load_script(relative_path: str):
    """Import a script under tools/ as a module (tools are scripts, not a package)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='session')
def tiny_demo_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('demo') / 'demo_cityscapes'
    generate_demo_data(
        str(out), num_train=8, num_val=4, height=64, width=128, seed=0)
    return out


def run_tool(*args, cwd=ROOT, timeout=600, env=None) -> subprocess.CompletedProcess:
    """Run `python tools/...` (or `bash tools/...sh`) and return the completed process."""
    command = list(args)
    if command[0].endswith('.py'):
        command = [sys.executable] + command
    elif command[0].endswith('.sh'):
        command = ['bash'] + command
    full_env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1', **(env or {}))
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Assert a tool run succeeded, showing the end of its output otherwise."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def metrics_of(work_dir) -> dict:
    """The metrics JSON tools/test.py writes as work_dir/<timestamp>/<timestamp>.json."""
    files = sorted(glob.glob(os.path.join(str(work_dir), '*', '*.json')))
    assert files, f'no metrics json under {work_dir}'
    with open(files[-1]) as f:
        return json.load(f)
