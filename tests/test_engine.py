"""Engine extensions: checkpoint loading on torch >= 2.6, CPU adaptation, preflight, label
checks."""
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import _load_checkpoint

import afno_seg  # noqa: F401
from afno_seg.datasets import BadSampleError, ValidateSegMap
from afno_seg.engine import CheckpointError, CPUAutocastOptimWrapper, UserError
from afno_seg.engine.precision import apply_precision
from afno_seg.engine.preflight import check_data_roots, check_model_types
from afno_seg.engine.runner import adapt_config_to_device

DEMO_CONFIG = os.path.join(os.path.dirname(__file__), '..', 'configs', 'demo',
                           'segformer_afno_demo.py')


def mmengine_like_checkpoint(path):
    """What mmengine's CheckpointHook stores besides tensors: a HistoryBuffer, numpy scalars."""
    state = {'meta': {'iter': 4, 'seed': np.int64(0)},
             'state_dict': {'w': torch.arange(3.)},
             'message_hub': {'log_scalars': {'train/loss': HistoryBuffer([1.0, 0.5], [1, 1])}}}
    torch.save(state, path)


def test_checkpoint_with_mmengine_objects_loads(tmp_path):
    path = str(tmp_path / 'iter_4.pth')
    mmengine_like_checkpoint(path)
    # The failure this loader exists for: torch >= 2.6's default refuses mmengine's objects.
    with pytest.raises(Exception):
        torch.load(path, weights_only=True)
    checkpoint = _load_checkpoint(path, map_location='cpu')
    assert torch.equal(checkpoint['state_dict']['w'], torch.arange(3.))
    assert checkpoint['message_hub']['log_scalars']['train/loss'].current() == 0.5


@pytest.mark.parametrize('damage', ['truncate', 'text', 'missing'])
def test_bad_checkpoint_error_names_file(tmp_path, damage):
    path = tmp_path / 'iter_4.pth'
    mmengine_like_checkpoint(str(path))
    if damage == 'truncate':
        path.write_bytes(path.read_bytes()[:200])
    elif damage == 'text':
        path.write_text('not a checkpoint\n')
    else:
        path.unlink()
    with pytest.raises(CheckpointError, match='iter_4.pth'):
        _load_checkpoint(str(path), map_location='cpu')


def gpu_style_config():
    return Config(dict(
        optim_wrapper=dict(type='AmpOptimWrapper', loss_scale='dynamic',
                           optimizer=dict(type='AdamW', lr=1e-3)),
        model=dict(type='EncoderDecoder', decode_head=dict(norm_cfg=dict(type='SyncBN')),
                   auxiliary_head=[dict(norm_cfg=dict(type='SyncBN'))]),
        env_cfg=dict(dist_cfg=dict(backend='nccl'))))


def test_adapt_config_without_cuda():
    cfg = gpu_style_config()
    adapt_config_to_device(cfg, distributed=True, cuda=False)
    apply_precision(cfg, 'bf16', cuda=False)
    assert cfg.optim_wrapper.type == 'CPUAutocastOptimWrapper'
    assert cfg.optim_wrapper.dtype == 'bfloat16' and 'loss_scale' not in cfg.optim_wrapper
    assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    assert cfg.model_wrapper_cfg == dict(type='MMDistributedDataParallel', device_ids=None,
                                         broadcast_buffers=False, find_unused_parameters=False)


def test_adapt_config_with_cuda_changes_nothing():
    cfg = gpu_style_config()
    adapt_config_to_device(cfg, distributed=True, cuda=True)
    assert cfg.to_dict() == gpu_style_config().to_dict()


def test_cpu_autocast_optim_wrapper_trains_in_bfloat16():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    wrapper = CPUAutocastOptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.05))
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    losses = []
    for _ in range(30):
        with wrapper.optim_context(model):
            out = model(x)
        assert out.dtype == torch.bfloat16
        loss = torch.nn.functional.mse_loss(out.float(), y)
        wrapper.update_params(loss)
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.8 * losses[0]


def test_ddp_wraps_cpu_module(tmp_path):
    """mmengine's own DDP wrapper from the adapted model_wrapper_cfg, built as Runner.wrap_model
    builds it (``device_ids=[LOCAL_RANK]`` as a default argument, which DDP refuses on a CPU)."""
    from mmengine.registry import MODEL_WRAPPERS
    cfg = gpu_style_config()
    adapt_config_to_device(cfg, distributed=True, cuda=False)
    dist.init_process_group('gloo', init_method=f'file://{tmp_path}/store', rank=0, world_size=1)
    try:
        model = MODEL_WRAPPERS.build(cfg.model_wrapper_cfg, default_args=dict(
            module=torch.nn.Linear(4, 2), device_ids=[0]))
        model(torch.randn(3, 4)).sum().backward()
        assert model.module.weight.grad is not None
    finally:
        dist.destroy_process_group()


def test_sync_bn_runs_as_batchnorm_in_a_cpu_process_group(tiny_demo_data, tmp_path, monkeypatch):
    """mmengine reverts SyncBN only without a process group; the tools' Runner (AfnoSegRunner)
    also reverts it under --launcher pytorch on a CPU, where SyncBN has no kernel (one rank)."""
    import socket

    from conftest import make_runner
    with socket.socket() as free:
        free.bind(('127.0.0.1', 0))
        port = free.getsockname()[1]
    for key, value in dict(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',
                           MASTER_PORT=str(port)).items():
        monkeypatch.setenv(key, value)
    try:
        runner = make_runner(tiny_demo_data, tmp_path, launcher='pytorch',
                             **{'model.decode_head.norm_cfg.type': 'SyncBN'})
        assert runner.distributed and runner.cfg.model.decode_head.norm_cfg.type == 'SyncBN'
        norms = [type(m).__name__ for m in runner.model.modules()
                 if 'BatchNorm' in type(m).__name__]
        assert norms and 'SyncBatchNorm' not in norms, norms
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_missing_data_root_says_what_to_do(tmp_path):
    cfg = Config.fromfile(DEMO_CONFIG)
    cfg.train_dataloader.dataset.data_root = str(tmp_path / 'nowhere')
    with pytest.raises(UserError) as info:
        check_data_roots(cfg, ['train_dataloader'])
    message = str(info.value)
    for expected in ('train_dataloader.dataset.data_root', 'nowhere', 'leftImg8bit',
                     'labelTrainIds', 'tools/dataset/cityscapes.py', 'make demo'):
        assert expected in message


def test_unknown_model_type_names_key_and_suggests():
    cfg = Config.fromfile(DEMO_CONFIG)
    cfg.model.backbone.mixers = dict(type='AFNOMixr')
    with pytest.raises(UserError) as info:
        check_model_types(cfg)
    assert 'model.backbone.mixers.type' in str(info.value)
    assert 'AFNOMixer' in str(info.value)
    check_model_types(Config.fromfile(DEMO_CONFIG))  # the real config passes


def test_validate_seg_map():
    check = ValidateSegMap(num_classes=19)
    ok = {'gt_seg_map': np.array([[0, 18], [255, 3]], np.uint8), 'ori_shape': (2, 2),
          'seg_map_path': 'a_gtFine_labelTrainIds.png'}
    assert check(dict(ok)) is not None
    with pytest.raises(BadSampleError, match=r'a_gtFine_labelIds.png.*\[26, 33\]'):
        check({**ok, 'gt_seg_map': np.array([[0, 33], [26, 255]], np.uint8),
               'seg_map_path': 'a_gtFine_labelIds.png'})
    with pytest.raises(BadSampleError, match='must match'):
        check({**ok, 'ori_shape': (4, 2)})


# A 64 MiB tensor allocated, written and freed in rounds; the child prints the minor page faults
# per 4 KiB page of rounds 17-19, with afno_seg's CPU memory cache or with it switched off. (With
# the cache the first rounds still fault: small allocations in between split the freed block until
# the heap holds two such blocks, as in the first steps of a training run. That took up to 10
# rounds in 15 clean processes here, and 6 warm-up rounds made the test fail about every other
# run, so 16 warm-up rounds: each costs milliseconds.)
_FAULTS_PROBE = r'''
import resource, torch
from afno_seg.engine.cpu_memory import cache_freed_cpu_memory
applied = cache_freed_cpu_memory()  # False where AFNO_SEG_CPU_MEMORY_CACHE=0
def faults_of_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tensor = torch.empty(16 * 2**20)  # 64 MiB, float32
    tensor.fill_(1.0)
    del tensor
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
for _ in range(16):
    faults_of_round()
print(applied, sum(faults_of_round() for _ in range(3)) / 3 / (64 * 2**20 / 4096))
'''


@pytest.mark.skipif(__import__('platform').libc_ver()[0] != 'glibc', reason='needs glibc')
@pytest.mark.parametrize('mode', ['cache', 'disabled'])
def test_cpu_memory_cache_stops_page_faults_of_large_tensors(mode):
    """glibc maps every large tensor afresh (one page fault per 4 KiB on first touch); with the
    cache later 64 MiB tensors re-use the freed heap memory; the env var turns it off (and then
    the premise shows: glibc's default faults the memory in anew)."""
    import subprocess
    import sys
    env = dict(os.environ, AFNO_SEG_CPU_MEMORY_CACHE='0' if mode == 'disabled' else '1')
    result = subprocess.run([sys.executable, '-c', _FAULTS_PROBE],
                            capture_output=True, text=True, env=env, timeout=120, check=True)
    applied, faults_per_page = result.stdout.split()
    if mode == 'cache':
        assert applied == 'True'
        assert float(faults_per_page) < 0.05
    else:
        assert applied == 'False'
        assert float(faults_per_page) > 0.5  # the premise: without it, memory is faulted anew


# ------------------------------------------------------------------ private names (issue 39)

FOREIGN = ('torch', 'mmengine', 'mmcv', 'mmseg', 'mmpretrain')


def _private(name: str) -> bool:
    return name.startswith('_') and not name.startswith('__')


def private_names_in_the_code() -> set[tuple[str, str]]:
    """(file, name) for each private name of torch or the OpenMMLab stack used in afno_seg/: an
    import of a private name or module, ``x._y`` on anything but self/cls/os/sys, and a
    ``self._y`` that a foreign base class of the class also reads, sets or defines; every module
    of afno_seg is imported first, so no class escapes."""
    import ast
    import importlib
    import inspect
    import pkgutil
    import re
    import sys
    from pathlib import Path
    root = Path(afno_seg.__file__).parent
    found = set()
    for path in sorted(root.rglob('*.py')):
        relative = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    node.module.split('.')[0] in FOREIGN:
                if any(_private(part) for part in node.module.split('.')):
                    found.add((relative, node.module))
                found.update((relative, f'{node.module}.{alias.name}') for alias in node.names
                             if _private(alias.name))
            elif isinstance(node, ast.Attribute) and _private(node.attr) and not (
                    isinstance(node.value, ast.Name)
                    and node.value.id in ('self', 'cls', 'os', 'sys')):
                found.add((relative, f'{ast.unparse(node.value)}.{node.attr}'))
    for info in pkgutil.walk_packages(afno_seg.__path__, 'afno_seg.'):  # every class, not only
        importlib.import_module(info.name)  # those of modules this test process has imported
    sources = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith('afno_seg.'):
            continue
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and cls.__module__ == name):
                continue
            bases = [base for base in cls.__mro__[1:] if base.__module__.split('.')[0] in FOREIGN]
            for attribute in set(re.findall(r'self\.(_[a-z]\w*)', inspect.getsource(cls))):
                for base in bases:
                    if base not in sources:
                        sources[base] = inspect.getsource(base)
                    if f'self.{attribute}' in sources[base] or \
                            f'def {attribute}(' in sources[base]:  # a private method of it
                        found.add((name.replace('.', '/') + '.py', f'self.{attribute}'))
    return found


def private_names_listed() -> set[tuple[str, str]]:
    import re
    text = open(os.path.join(os.path.dirname(__file__), '..', 'docs', 'private_apis.md')).read()
    listed = text.split('## The list', 1)[1].split('\n## ', 1)[0]
    out = set()
    for item in re.split(r'\n- ', '\n' + listed)[1:]:
        path, rest = re.match(r'`([^`]+)`: (.*?) — ', item.replace('\n', ' ')).groups()
        out.update((path, name) for name in re.findall(r'`([^`]+)`', rest))
    return out


def test_private_names_are_listed():
    """docs/private_apis.md lists exactly the private torch/OpenMMLab names the code uses."""
    assert private_names_in_the_code() == private_names_listed()
