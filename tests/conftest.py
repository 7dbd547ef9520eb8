"""Shared fixtures and helpers: a tiny generated demo dataset, ONE trained tiny run that several
test files read, a runner for the tools as subprocesses, and in-process Runners on the tiny config.

Cost rules (the suite runs on 2 cores): a subprocess costs seconds of torch/mmseg import before it
does anything, so tests share ``tiny_trained`` instead of training their own, call a tool's
``main(argv)`` in-process where the process boundary is not the behaviour under test, and copy a
shared work dir before changing it.
"""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from afno_seg.datasets.demo_dataset import generate as generate_demo_data
from afno_seg.engine import build_runner, load_config

# Under pytest-xdist (README: `-n 2`, one worker per core) each worker computes on one thread;
# the tools the tests start as processes get OMP_NUM_THREADS=1 anyway (run_tool, seam_env).
if os.environ.get('PYTEST_XDIST_WORKER'):
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = str(ROOT / 'tests' / 'configs' / 'tiny_demo.py')
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def load_script(relative_path: str):
    """Import a script under tools/ as a module (tools are scripts, not a package)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_logger_outlives_its_test():
    """mmengine's MMLogger instances keep the ``sys.stdout``/``sys.stderr`` of the moment they
    were made; in-process tool runs make them under a test's capture, which pytest closes when
    the test ends. A later test's ``print_log(logger='current')`` would then write to a closed
    stream ('--- Logging error ---' with a traceback on stderr). A tool run as a process never
    meets this; each test starts with no logger instance, as a process does. Visualizers too:
    mmengine names one after the config and the second a Runner started, so two in-process runs
    of one config within a second would share the first one's save_dir."""
    from mmengine.logging import MMLogger
    from mmengine.visualization import Visualizer
    yield
    MMLogger._instance_dict.clear()
    visualizers = [Visualizer]  # each subclass (mmseg's SegLocalVisualizer) keeps its own
    while visualizers:
        cls = visualizers.pop()
        cls._instance_dict.clear()
        visualizers += cls.__subclasses__()


@pytest.fixture(scope='session')
def tiny_demo_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('demo') / 'demo_cityscapes'
    generate_demo_data(
        str(out), num_train=8, num_val=4, height=64, width=128, seed=0)
    return out


def data_roots(root) -> dict:
    """``--cfg-options`` pointing every loader of the tiny config at ``root``."""
    return {f'{loader}.dataset.data_root': str(root) + '/' for loader in LOADERS}


def cli_options(options: dict) -> list:
    return ['--cfg-options'] + [f'{key}={value}' for key, value in options.items()]


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


@pytest.fixture(scope='session')
def tiny_trained(tiny_demo_data, tmp_path_factory) -> SimpleNamespace:
    """THE trained tiny run, shared (read-only: copy before changing anything): tools/train.py on
    tests/configs/tiny_demo.py, 6 iterations saving iter_3 and iter_6, validation at 6, with the
    TensorBoard switch on. ``work_dir`` (Path), ``result`` (the CompletedProcess)."""
    work_dir = tmp_path_factory.mktemp('tiny_trained')
    result = check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(work_dir),
                            *cli_options(data_roots(tiny_demo_data)),
                            env={'AFNO_SEG_TENSORBOARD': '1'}))
    return SimpleNamespace(work_dir=work_dir, result=result)


# ----------------------------------------------------------------- in-process Runners


_runner_count = 0


def make_runner(data_root, work_dir, config=TINY_CONFIG, **options):
    """A Runner built the way tools/train.py builds it: unique experiment name, no validation
    unless ``options`` set ``val_cfg`` etc. back."""
    global _runner_count
    _runner_count += 1
    no_validation = {'val_cfg': None, 'val_dataloader': None, 'val_evaluator': None}
    options = {**data_roots(data_root), **no_validation,
               'experiment_name': f'tests_{os.getpid()}_{_runner_count}', **options}
    cfg = load_config(config, cfg_options=options, work_dir=str(work_dir))
    return build_runner(cfg, ['train_dataloader'])


def read_checkpoint(path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)


def assert_same_training_state(ours: dict, reference: dict) -> None:
    """Bitwise: weights, optimizer state, schedulers, iteration and the torch generator."""
    assert ours['meta']['iter'] == reference['meta']['iter']
    for key, value in reference['state_dict'].items():
        assert torch.equal(ours['state_dict'][key], value), key
    for index, slots in reference['optimizer']['state'].items():
        for name, value in slots.items():
            assert torch.equal(torch.as_tensor(ours['optimizer']['state'][index][name]),
                               torch.as_tensor(value)), (index, name)
    assert ours['param_schedulers'] == reference['param_schedulers']
    assert torch.equal(ours['rng_state']['torch'], reference['rng_state']['torch'])


# ----------------------------------------------------------------- tools/train.py with seams

SEAMS = '''
"""Test seam imported through custom_imports: slow or failing checkpoint writes."""
import errno, os, time
from afno_seg.engine import atomic_io

DELAY = float(os.environ.get('AFNO_TEST_SAVE_DELAY', '0'))
FAIL = os.environ.get('AFNO_TEST_FAIL_SAVE', '')


def _write_all(file, data, path):
    if FAIL and path.endswith(FAIL):
        file.write(data[:len(data) // 2])
        file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if DELAY and path.endswith('.pth'):  # 16 chunks: a kill lands half-way through the file
        step = -(-len(data) // 16)
        for start in range(0, len(data), step):
            file.write(data[start:start + step])
            file.flush()
            time.sleep(DELAY / 16)
    else:
        file.write(data)


atomic_io._write_all = _write_all
'''


def write_seamed_config(folder: Path, max_iters: int, **lines: str) -> str:
    """A config over tiny_demo with the reliability hooks and the test seam imported."""
    (folder / 'reliability_seams.py').write_text(SEAMS)
    extra = '\n'.join(f'{key} = {value}' for key, value in lines.items())
    config = folder / 'reliability_config.py'
    config.write_text(textwrap.dedent(f'''
        _base_ = [{TINY_CONFIG!r}]
        custom_imports = dict(imports=['afno_seg', 'reliability_seams'],
                              allow_failed_imports=False)
        train_cfg = dict(max_iters={max_iters}, val_interval=100)
        param_scheduler = [
            dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=2),
            dict(type='PolyLR', eta_min=0.0, power=1.0, begin=2, end={max_iters}, by_epoch=False)
        ]
        custom_hooks = [dict(type='RandomStateHook'), dict(type='NonFiniteLossHook')]
        ''') + extra + '\n')
    return str(config)


def seam_env(folder: Path, **variables) -> dict:
    return dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1',
                PYTHONPATH=os.pathsep.join([str(folder), os.environ.get('PYTHONPATH', '')]),
                **variables)


def complete_checkpoint_named_by(work_dir: Path) -> int:
    """Check the work_dir a kill left: returns the iteration ``last_checkpoint`` names (0: none).

    Every visible ``iter_*.pth`` must load completely and ``last_checkpoint`` must name one.
    """
    for path in glob.glob(str(work_dir / 'iter_*.pth')):
        checkpoint = read_checkpoint(path)  # raises on a truncated file
        assert checkpoint['meta']['iter'] == int(re.search(r'iter_(\d+)', path)[1])
    last = work_dir / 'last_checkpoint'
    if not last.exists():
        return 0
    named = last.read_text().strip()
    assert os.path.isfile(named), f'last_checkpoint names {named!r}, which does not exist'
    return read_checkpoint(named)['meta']['iter']


def wait_for(condition, process, timeout=180.0) -> bool:
    """Poll ``condition`` every 5 ms; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    raise TimeoutError('training made no progress')


# ----------------------------------------------------------------- tiny segmentors for export

ONE_LAYER = 'model.backbone.num_layers=[1,1,1,1]'  # tiny_segmentor's depth, for a tool's config


def tiny_segmentor(variant: str, num_layers=(1, 1, 1, 1)):
    """The tiny config's segmentor with ``variant`` in every stage; one layer per stage by
    default (export time grows with the graph; every mixer still sits in every stage grid)."""
    from mmengine.config import Config
    from mmseg.registry import MODELS

    from afno_seg.mixers import mixer_variants
    cfg = Config.fromfile(TINY_CONFIG)
    if num_layers is not None:
        cfg.model.backbone.num_layers = list(num_layers)
    mixer = dict(mixer_variants()[variant])
    if mixer['type'] == 'AFNOMixer':
        mixer['num_blocks'] = 4
    if mixer['type'] == 'FNOMixer':
        mixer['modes'] = (4, 4)
    cfg.model.backbone.mixers = mixer
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.eval()


def save_segmentor_checkpoint(model, path) -> str:
    """``model``'s weights in mmengine's checkpoint layout, with Cityscapes' dataset_meta."""
    from mmseg.datasets import CityscapesDataset
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(dataset_meta=dict(CityscapesDataset.METAINFO))), path)
    return str(path)


def onnx_ops(path) -> set[str]:
    """The op types of an ONNX file's graph and its local functions."""
    import onnx
    model = onnx.load(str(path))
    return {node.op_type for nodes in [model.graph.node, *(f.node for f in model.functions)]
            for node in nodes}
