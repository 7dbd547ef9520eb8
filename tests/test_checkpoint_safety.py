"""Checkpoints are data, never code (issue 18).

A checkpoint whose pickle runs ``os.system`` is refused by every entry point (the marker file is
never created, exit status 1, one line naming the file); a real training checkpoint loads
everywhere without the opt-in; ``--trust-checkpoint`` loads what the safe loader refuses; a
checkpoint of another mixer or with no tensors is refused by inference and test; published
``.pth``/``.safetensors`` files predict pixel for pixel as the original; ``import afno_seg``
leaves torch's and mmengine's own loading as safe as it was. The tools run in-process (their
``main``) except where the process boundary is the point.
"""
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config

import afno_seg  # noqa: F401
from afno_seg.engine import run_tool
from afno_seg.engine.checkpoint import (
    UnsafeCheckpointError,
    load_checkpoint_file,
    trusted_checkpoints,
)

from conftest import TINY_CONFIG

ROOT = Path(__file__).resolve().parents[1]


#: Config text mmengine's Runner.resume would run (``Config.fromstring``; no import line).
CONFIG_PAYLOAD = "x = __import__('os').system('touch {marker}')"


class Payload:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


def tool(relative_path: str):
    """A tool script as a module under a name of its own (``test`` is the stdlib's)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(f'tool_{path.stem}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def data_options(root) -> list[str]:
    root = str(root) + '/'
    return ['--cfg-options'] + [f'{loader}.dataset.data_root={root}' for loader in
                                ('train_dataloader', 'val_dataloader', 'test_dataloader')]


@pytest.fixture(scope='session')
def trained(tiny_demo_data, tmp_path_factory) -> Path:
    """The real thing: iter_6.pth of one 6-iteration tools/train.py run."""
    work_dir = tmp_path_factory.mktemp('ckpt_train')
    main = tool('tools/train.py').main
    assert run_tool(lambda: main([TINY_CONFIG, '--work-dir', str(work_dir),
                                  *data_options(tiny_demo_data)])) == 0
    return work_dir / 'iter_6.pth'


@pytest.fixture
def evil(tmp_path):
    """(payload checkpoint, the marker its unpickling would create)."""
    marker = tmp_path / 'MARKER'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'meta': {'note': Payload(marker)}}, path)
    return path, marker


def refused(capsys, marker, argv_main, *argv) -> str:
    """Run a tool's main as its ``__main__`` does; assert status 1, no marker; the message."""
    code = run_tool(lambda: argv_main(list(argv)))
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert not marker.exists()
    assert 'Traceback' not in err
    return err


def assert_refusal(message: str, path: Path, global_name: str = 'posix.system') -> None:
    assert str(path) in message and global_name in message and '--trust-checkpoint' in message


# -- the payload against every entry point ----------------------------------------------------

@pytest.mark.parametrize('script, extra', [
    ('tools/test.py', []),
    ('tools/inference.py', ['IMAGES', '--out-dir', 'OUT']),
    ('tools/deployment/pytorch2onnx.py', ['--shape', '64', '64', '--out', 'OUT/m.onnx']),
    ('tools/analysis/spectrum.py', ['--out-dir', 'OUT']),
])
def test_tools_refuse_payload(script, extra, evil, tiny_demo_data, tmp_path, capsys):
    path, marker = evil
    images = str(tiny_demo_data / 'leftImg8bit' / 'val')
    extra = [images if a == 'IMAGES' else a.replace('OUT', str(tmp_path / 'out')) for a in extra]
    argv = [TINY_CONFIG, str(path), *extra]
    if script == 'tools/test.py':
        argv += ['--work-dir', str(tmp_path / 'work'), *data_options(tiny_demo_data)]
    err = refused(capsys, marker, tool(script).main, *argv)
    assert_refusal(err, path)
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize('how', ['load_from', 'resume'])
def test_train_refuses_payload(how, evil, tiny_demo_data, tmp_path, capsys):
    """Refused where the Runner reads the file (the registered loader), in one line."""
    path, marker = evil
    work = tmp_path / 'work'
    argv = [TINY_CONFIG, '--work-dir', str(work), *data_options(tiny_demo_data)]
    if how == 'load_from':
        argv.append(f'load_from={path}')
    else:
        work.mkdir()
        (work / 'last_checkpoint').write_text(str(path))
        argv.insert(1, '--resume')
    err = refused(capsys, marker, tool('tools/train.py').main, *argv)
    assert_refusal(err, path)
    assert len(err.strip().splitlines()) == 1, err


def test_converter_publisher_and_library_refuse_payload(evil, tmp_path, capsys):
    path, marker = evil
    converter = tool('tools/model_converters/mit2afno_seg.py')
    assert converter.main([str(path), str(tmp_path / 'o')]) == 1
    assert_refusal(capsys.readouterr().err, path)
    assert_refusal(refused(capsys, marker, tool('tools/publish_model.py').main, str(path),
                           str(tmp_path / 'pub')), path)
    from mmengine.runner.checkpoint import _load_checkpoint
    from mmseg.apis import init_model

    from afno_seg.backbones import load_pretrained_mit
    from afno_seg.engine.checkpoint import read_state_dict
    for load in (read_state_dict, load_checkpoint_file,
                 lambda p: _load_checkpoint(p, map_location='cpu'),  # Runner, MMSegInferencer
                 lambda p: init_model(Config.fromfile(TINY_CONFIG), p, device='cpu'),
                 lambda p: load_pretrained_mit(torch.nn.Linear(1, 1), p)):  # init_cfg Pretrained
        with pytest.raises(UnsafeCheckpointError) as error:
            load(str(path))
        assert_refusal(str(error.value), path)
    assert not marker.exists()


def test_resume_does_not_run_config_text(trained, tiny_demo_data, tmp_path, capsys):
    """mmengine's Runner.resume would run Config.fromstring(meta['config'])."""
    marker = tmp_path / 'MARKER'
    work = tmp_path / 'work'
    work.mkdir()
    checkpoint = load_checkpoint_file(str(trained))
    checkpoint['meta']['config'] = CONFIG_PAYLOAD.format(marker=marker)
    torch.save(checkpoint, work / 'iter_6.pth')
    code = run_tool(lambda: tool('tools/train.py').main([
        TINY_CONFIG, '--resume', '--work-dir', str(work), *data_options(tiny_demo_data),
        f'load_from={work / "iter_6.pth"}']))
    assert code == 0, capsys.readouterr().err[-3000:]
    assert not marker.exists()


class Attribute:
    """Unpickles as ``getattr(owner, name)``, as HistoryBuffer's statistics methods do."""

    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def __reduce__(self):
        return getattr, (self.owner, self.name)


def test_getattr_reaches_history_buffer_statistics_only(tmp_path):
    from mmengine.logging import HistoryBuffer
    torch.save({'mean': Attribute(HistoryBuffer, 'mean')}, tmp_path / 'ok.pth')
    assert load_checkpoint_file(str(tmp_path / 'ok.pth'))['mean'] is HistoryBuffer.mean
    for owner, name in ((HistoryBuffer, '__init__'), (torch.Tensor, 'mean')):
        torch.save({'x': Attribute(owner, name)}, tmp_path / 'bad.pth')
        with pytest.raises(UnsafeCheckpointError, match='builtins.getattr'):
            load_checkpoint_file(str(tmp_path / 'bad.pth'))


def test_import_leaves_torch_and_mmengine_as_safe_as_they_were(tmp_path):
    """A fresh interpreter: torch's allowlist and mmengine's refusal before and after import."""
    marker = tmp_path / 'MARKER'
    script = f"""
import os, torch
from mmengine.runner.checkpoint import CheckpointLoader
class Payload:
    def __reduce__(self):
        return os.system, ('touch {marker}',)
torch.save({{'x': Payload()}}, {str(tmp_path / 'evil.pth')!r})
def outcomes():
    # torch adds its own (DTensor, ...) when torch.distributed.tensor is imported: not counted
    result = [sorted(str(g) for g in torch.serialization.get_safe_globals() if not getattr(
        g[0] if isinstance(g, tuple) else g, '__module__', '').startswith('torch'))]
    for load in (lambda p: torch.load(p), lambda p: CheckpointLoader.load_checkpoint(p)):
        try:
            load({str(tmp_path / 'evil.pth')!r})
            result.append('loaded')
        except Exception as error:
            result.append('refused' if 'posix.system' in str(error) else repr(error))
    return result
before = outcomes()
import afno_seg
after = outcomes()
assert before == after and before[1:] == ['refused', 'refused'], (before[1:], after[1:])
"""
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert not marker.exists()


# -- real checkpoints, the opt-in ---------------------------------------------------------------

def count_reads(monkeypatch, path) -> list:
    """The ``mmap`` argument of every ``torch.load`` of ``path`` from now on (issue 39: a reader
    reads its checkpoint once and hands the state dict and meta on)."""
    reads, load = [], torch.load

    def counted(file, *args, **kwargs):
        if str(file) == str(path):
            reads.append(kwargs.get('mmap', False))
        return load(file, *args, **kwargs)
    monkeypatch.setattr(torch, 'load', counted)
    return reads


def test_training_checkpoint_loads_everywhere_without_opt_in(trained, tiny_demo_data, tmp_path,
                                                             capsys, monkeypatch):
    from mmseg.apis import init_model

    from afno_seg.deployment.model import load_segmentor
    from afno_seg.engine.checkpoint import read_state_dict
    assert 'message_hub' in load_checkpoint_file(str(trained))
    assert len(read_state_dict(str(trained))) > 0
    init_model(Config.fromfile(TINY_CONFIG), str(trained), device='cpu')
    reads = count_reads(monkeypatch, trained)
    load_segmentor(TINY_CONFIG, str(trained))  # tools/analysis/spectrum.py's loader
    assert reads == [False]
    code = run_tool(lambda: tool('tools/test.py').main([
        TINY_CONFIG, str(trained), '--work-dir', str(tmp_path / 'test'),
        *data_options(tiny_demo_data)]))
    assert code == 0, capsys.readouterr().err[-3000:]
    assert reads == [False, False]  # the tool leaves the one read to the Runner's safe loader
    dumped, = (tmp_path / 'test').rglob('tiny_demo.py')  # the config the evaluation ran
    assert "type='LowResFusionSegformerHead'" in dumped.read_text()
    code = run_tool(lambda: tool('tools/inference.py').main([
        TINY_CONFIG, str(trained), str(tiny_demo_data / 'leftImg8bit' / 'val'), '--out-dir',
        str(tmp_path / 'inference'), '--no-progress']))
    assert code == 0, capsys.readouterr().err[-3000:]


def test_pretrained_backbone_from_a_segmentor_checkpoint_loads_every_tensor(trained,
                                                                            monkeypatch):
    """MiT ``init_cfg`` from a segmentor checkpoint: no opt-in, one read, every tensor loaded."""
    from afno_seg.backbones import MixerMiT, load_pretrained_mit
    cfg = Config.fromfile(TINY_CONFIG).model.backbone
    backbone = MixerMiT(**{k: v for k, v in cfg.items() if k not in ('type', 'init_cfg')})
    reads = count_reads(monkeypatch, trained)
    load_pretrained_mit(backbone, str(trained), prefix='backbone.')
    assert reads == [False]
    state = torch.load(trained, weights_only=False)['state_dict']
    assert all(torch.equal(value, state[f'backbone.{key}'])
               for key, value in backbone.state_dict().items())


def test_load_from_keeps_partial_loading(trained, tiny_demo_data, tmp_path, capsys):
    """A narrower decode head: its tensors are skipped (mmengine prints them), training runs."""
    main = tool('tools/train.py').main
    assert run_tool(lambda: main([
        TINY_CONFIG, '--work-dir', str(tmp_path), *data_options(tiny_demo_data),
        f'load_from={trained}', 'model.decode_head.channels=16', 'train_cfg.max_iters=1',
        'train_cfg.val_interval=100'])) == 0
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert f'Load checkpoint from {trained}' in log
    out = capsys.readouterr().out
    assert 'size mismatch for decode_head.' in out and 'size mismatch for backbone.' not in out


def test_opt_in_loads_what_the_safe_loader_refuses(trained, evil, tiny_demo_data, tmp_path,
                                                   capsys, monkeypatch):
    from afno_seg.engine import checkpoint as loader
    logged = []
    monkeypatch.setattr(loader, 'print_log', lambda message, **_: logged.append(message))
    checkpoint = torch.load(trained, map_location='cpu', weights_only=False)
    checkpoint['meta']['note'] = Fraction(1, 3)  # a global outside the allowlist, harmless
    odd = tmp_path / 'odd.pth'
    torch.save(checkpoint, odd)
    images = str(tiny_demo_data / 'leftImg8bit' / 'val')
    argv = [TINY_CONFIG, str(odd), images, '--out-dir', str(tmp_path / 'out'), '--no-progress']
    inference = tool('tools/inference.py')
    assert run_tool(lambda: inference.main(argv)) == 1
    assert_refusal(capsys.readouterr().err, odd, 'fractions.Fraction')
    assert run_tool(lambda: inference.main(argv + ['--trust-checkpoint'])) == 0
    assert len(logged) == 1 and str(odd) in logged[0] and '--trust-checkpoint' in logged[0]
    # "Loads as today": a full pickle, payload included; and nothing persists after the block.
    path, marker = evil
    with trusted_checkpoints(True):
        load_checkpoint_file(str(path))
    assert marker.exists()
    with pytest.raises(UnsafeCheckpointError):
        load_checkpoint_file(str(path))


# -- checkpoints that do not fit ----------------------------------------------------------------

@pytest.fixture(scope='module')
def misfits(tmp_path_factory) -> dict:
    """The tiny model with ESA mixers (meta with its config); a checkpoint with no tensors."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    folder = tmp_path_factory.mktemp('misfit')
    cfg = Config.fromfile(TINY_CONFIG)
    cfg.model.backbone.mixers = dict(type='EfficientSelfAttentionMixer')
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    meta = dict(cfg=cfg.pretty_text, experiment_name='tiny_esa_20260101_000000')
    torch.save(dict(state_dict=model.state_dict(), meta=meta), folder / 'esa.pth')
    torch.save(dict(state_dict={}, meta={}), folder / 'empty.pth')
    return dict(esa=folder / 'esa.pth', empty=folder / 'empty.pth')


@pytest.mark.parametrize('kind', ['esa', 'empty'])
def test_inference_and_test_refuse_checkpoints_that_do_not_fit(kind, misfits, tiny_demo_data,
                                                               tmp_path, capsys):
    path = misfits[kind]
    images = str(tiny_demo_data / 'leftImg8bit' / 'val')
    for script, argv in (
            ('tools/inference.py', [images, '--out-dir', str(tmp_path / 'out')]),
            ('tools/test.py', ['--work-dir', str(tmp_path / 'work'),
                               *data_options(tiny_demo_data)])):
        main = tool(script).main
        assert run_tool(lambda: main([TINY_CONFIG, str(path), *argv])) == 1
        err = capsys.readouterr().err
        message = [line for line in err.splitlines() if line.startswith('error:')][-1]
        assert str(path) in message and 'Traceback' not in err
        if kind == 'empty':
            assert 'holds no tensor of this model: found 0 of' in message
        else:
            assert 'backbone mixers' in message and 'AFNOMixer' in message
            assert 'attn.attn.in_proj' in message  # what the checkpoint holds instead
            assert 'tiny_esa (mixers EfficientSelfAttentionMixer)' in message
    assert not (tmp_path / 'out' / 'summary.json').exists()


def test_fit_hook_names_the_file_the_runner_read(tmp_path):
    """``load_from``, else the work_dir's ``last_checkpoint``: what mmengine's ``load_or_resume``
    reads (public state, not the Runner's private ``_load_from``)."""
    from types import SimpleNamespace

    from afno_seg.engine.checkpoint_fit import CheckpointFitHook, CheckpointMismatchError
    model = torch.nn.Linear(2, 2)
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_4.pth'))
    for load_from, name in ((None, tmp_path / 'iter_4.pth'), ('a.pth', 'a.pth')):
        runner = SimpleNamespace(model=model, cfg=Config(dict(load_from=load_from)),
                                 work_dir=str(tmp_path))
        CheckpointFitHook().after_load_checkpoint(runner, {'state_dict': model.state_dict()})
        with pytest.raises(CheckpointMismatchError,
                           match=f'checkpoint {re.escape(str(name))} holds no tensor of this'):
            CheckpointFitHook().after_load_checkpoint(runner, {'state_dict': {}})


def test_classes_come_from_the_config_when_the_meta_has_none(trained, tmp_path, caplog):
    from afno_seg.deployment import load_segmentor
    checkpoint = torch.load(trained, map_location='cpu', weights_only=False)
    bare = tmp_path / 'bare.pth'
    torch.save(dict(state_dict=checkpoint['state_dict'], meta=dict(dataset_meta={})), bare)
    model = load_segmentor(TINY_CONFIG, str(bare))
    assert len(model.dataset_meta['classes']) == 19 and len(model.dataset_meta['palette']) == 19
    assert model.dataset_meta['classes'][0] == 'road'


def test_loaded_segmentor_fuses_its_head_at_low_resolution(trained):
    from mmseg.models.decode_heads import SegformerHead

    from afno_seg.decode_heads import LowResFusionSegformerHead
    from afno_seg.deployment import load_segmentor
    model = load_segmentor(TINY_CONFIG, str(trained))
    assert type(model.decode_head) is LowResFusionSegformerHead
    inputs = torch.randn(1, 3, 64, 96)
    metas = [dict(img_shape=(64, 96), ori_shape=(64, 96))]
    with torch.no_grad():
        fused = model.encode_decode(inputs, metas)
        model.decode_head.__class__ = SegformerHead  # mmseg's computation, trained weights
        torch.testing.assert_close(fused, model.encode_decode(inputs, metas), rtol=1e-5,
                                   atol=1e-5)


# -- weights-only releases ----------------------------------------------------------------------

def test_published_files_predict_as_the_original(trained, tiny_demo_data, tmp_path, capsys):
    from afno_seg.deployment import Segmenter, load_segmentor, read_image
    out = tmp_path / 'pub'
    assert run_tool(lambda: tool('tools/publish_model.py').main([str(trained), str(out)])) == 0
    pth, = out.glob('iter_6-*.pth')
    safetensors, = out.glob('iter_6-*.safetensors')
    for path in (pth, safetensors):  # mmseg's name: the sha256 prefix of the file itself
        assert path.stem.rsplit('-', 1)[1] == hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    plain = torch.load(pth, map_location='cpu', weights_only=True)  # no allowlist needed
    assert set(plain) == {'state_dict', 'meta'}
    assert plain['meta']['dataset_meta']['classes'][0] == 'road' and 'cfg' in plain['meta']
    from safetensors import safe_open
    with safe_open(str(safetensors), framework='pt') as handle:
        assert json.loads(handle.metadata()['afno_seg.meta']) == plain['meta']
    assert load_checkpoint_file(str(safetensors))['meta'] == plain['meta']  # read back too
    images = [read_image(str(p)) for p in
              sorted((tiny_demo_data / 'leftImg8bit' / 'val').glob('*/*.png'))[:2]]
    assert len(images) == 2
    labels = {}
    for path in (trained, pth, safetensors):
        model = load_segmentor(TINY_CONFIG, str(path))
        assert model.dataset_meta['classes'][0] == 'road'
        labels[path] = [p.label for p in Segmenter(model)(images)]
    for path in (pth, safetensors):
        assert len(labels[path]) == len(labels[trained]) == 2  # the loop compares every image
        for ours, original in zip(labels[path], labels[trained]):
            assert np.array_equal(ours, original)
