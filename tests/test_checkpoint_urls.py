"""No code from data on every path (issue 35): http(s) URLs downloaded and read as data, every
other scheme mmengine knows refused in one line, config text inside checkpoints, ``last_checkpoint``
indirection, our own words in every refusal.

The URL payloads are served by an HTTP server this module starts on 127.0.0.1 (port chosen by the
kernel, stopped after each test); torch.hub's cache is the test's folder.
"""
import functools
import http.server
import threading
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from test_checkpoint_safety import (
    CONFIG_PAYLOAD,
    Payload,
    data_options,
    refused,
    tool,
)
from test_mmseg_apis import checkpoint_of

import afno_seg  # noqa: F401  (registers the loader)
from afno_seg.engine import run_tool
from afno_seg.engine.checkpoint import CheckpointError, UnsafeCheckpointError, load_checkpoint_file

from conftest import TINY_CONFIG


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines on stderr
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    """``url`` of a loopback HTTP server serving ``folder``; caches under ``tmp_path``."""
    folder = tmp_path / 'served'
    folder.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    for name in ('http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'all_proxy',
                 'ALL_PROXY'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('no_proxy', '127.0.0.1')
    try:
        yield SimpleNamespace(url=f'http://127.0.0.1:{httpd.server_address[1]}', folder=folder)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def served_evil(server, tmp_path):
    """(URL of a pickled ``os.system`` payload, the marker it would create)."""
    marker = tmp_path / 'MARKER'
    torch.save({'state_dict': {}, 'meta': {'note': Payload(marker)}}, server.folder / 'evil.pth')
    return f'{server.url}/evil.pth', marker


def test_every_prefix_mmengine_registers_reads_through_the_one_loader():
    from mmengine.runner.checkpoint import CheckpointLoader

    from afno_seg.engine.checkpoint import load_from_safe_loader
    schemes = CheckpointLoader._schemes  # what mmengine dispatches on (private: checked here)
    assert {'', 'http://', 'https://', 'open-mmlab://', 'mmcls://'} <= set(schemes)
    assert {name: loader for name, loader in schemes.items()
            if loader is not load_from_safe_loader} == {}


def test_mmengine_loader_refuses_a_served_payload(served_evil):
    from mmengine.runner.checkpoint import _load_checkpoint
    url, marker = served_evil
    with pytest.raises(UnsafeCheckpointError) as error:
        _load_checkpoint(url, map_location='cpu')  # Runner, init_cfg Pretrained, inferencers
    assert 'posix.system' in str(error.value) and '\n' not in str(error.value)
    assert not marker.exists()


def test_other_schemes_and_unreachable_urls_are_one_line(tmp_path, monkeypatch):
    """mmengine's model-name tables (``open-mmlab://``, ...), pavi, s3: refused before anything
    is looked up or fetched, through mmengine's loader too."""
    from mmengine.runner.checkpoint import _load_checkpoint
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    for url in ('open-mmlab://resnet50_v1c', 'openmmlab://resnet50_v1c', 'torchvision://resnet18',
                'modelzoo://resnet18', 'mmcls://resnet50', 's3://bucket/x.pth', 'pavi://x/y.pth',
                'ftp://host/x.pth'):
        for load in (load_checkpoint_file, _load_checkpoint):
            with pytest.raises(CheckpointError, match='download it and pass its path') as error:
                load(url)
            assert '\n' not in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing downloaded
    with pytest.raises(CheckpointError, match='could not download checkpoint') as error:
        load_checkpoint_file('http://127.0.0.1:9/none.pth')  # discard port: refused at once
    assert '\n' not in str(error.value)


def _tiny_with_init_cfg(tmp_path, url) -> str:
    path = tmp_path / 'with_init_cfg.py'
    path.write_text(f"_base_ = [{TINY_CONFIG!r}]\nmodel = dict(backbone=dict(init_cfg=dict("
                    f"type='Pretrained', checkpoint={url!r})))\n")
    return str(path)


@pytest.mark.parametrize('how', ['load_from', 'resume', 'init_cfg'])
def test_train_refuses_a_served_payload(how, served_evil, tiny_demo_data, tmp_path, capsys):
    """Refused where the Runner (load_from, resume) or the model's init_cfg reads it."""
    url, marker = served_evil
    work = tmp_path / 'work'
    config = _tiny_with_init_cfg(tmp_path, url) if how == 'init_cfg' else TINY_CONFIG
    argv = [config, '--work-dir', str(work), *data_options(tiny_demo_data)]
    if how == 'load_from':
        argv.append(f'load_from={url}')
    elif how == 'resume':
        work.mkdir()
        (work / 'last_checkpoint').write_text(url)
        argv.insert(1, '--resume')
    err = refused(capsys, marker, tool('tools/train.py').main, *argv)
    assert 'posix.system' in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize('script', ['tools/test.py', 'tools/inference.py'])
def test_test_and_inference_refuse_a_served_payload(script, served_evil, tiny_demo_data, tmp_path,
                                                    capsys):
    url, marker = served_evil
    extra = (['--work-dir', str(tmp_path / 'work'), *data_options(tiny_demo_data)]
             if script == 'tools/test.py' else
             [str(tiny_demo_data / 'leftImg8bit' / 'val'), '--out-dir', str(tmp_path / 'out')])
    err = refused(capsys, marker, tool(script).main, TINY_CONFIG, url, *extra)
    assert 'posix.system' in err and len(err.strip().splitlines()) == 1, err


# -- config text in a checkpoint ----------------------------------------------------------------

@pytest.mark.parametrize('where', ['meta', 'message_hub'])
def test_inferencer_without_a_config_does_not_run_config_text(where, tmp_path):
    """MMSegInferencer(model=None) builds its model from the checkpoint's config text: refused."""
    from mmseg.apis import MMSegInferencer
    marker = tmp_path / 'MARKER'
    text = CONFIG_PAYLOAD.format(marker=marker)
    checkpoint = {'state_dict': {}, 'meta': {}}
    if where == 'meta':
        checkpoint['meta']['cfg'] = text
    else:
        checkpoint['message_hub'] = {'runtime_info': {'cfg': text}}
    torch.save(checkpoint, tmp_path / 'c.pth')
    with pytest.raises(ValueError, match='Cannot find the config in the checkpoint'):
        MMSegInferencer(model=None, weights=str(tmp_path / 'c.pth'), device='cpu')
    assert not marker.exists()


# -- what stands for a checkpoint; our own words ------------------------------------------------

def test_a_folder_or_last_checkpoint_names_the_checkpoint(tiny_demo_data, tmp_path, capsys):
    work = tmp_path / 'work'
    work.mkdir()
    checkpoint_of(Config.fromfile(TINY_CONFIG), work / 'iter_6.pth')
    earlier = load_checkpoint_file(str(work / 'iter_6.pth'))
    earlier['meta']['iter'] = 3
    torch.save(earlier, work / 'iter_3.pth')
    (work / 'last_checkpoint').write_text(str(work / 'iter_6.pth'))
    assert 'iter' not in load_checkpoint_file(str(work / 'last_checkpoint'))['meta']
    (work / 'last_checkpoint').write_text('iter_3.pth')  # relative: to its folder
    assert load_checkpoint_file(str(work))['meta']['iter'] == 3
    (work / 'last_checkpoint').unlink()
    with pytest.raises(CheckpointError, match='last_checkpoint is missing or empty') as error:
        load_checkpoint_file(str(work))
    assert '\n' not in str(error.value)
    (work / 'last_checkpoint').write_text(str(work / 'iter_6.pth'))
    from afno_seg.deployment.model import load_segmentor
    load_segmentor(TINY_CONFIG, str(work))  # what tools/inference.py reads its checkpoint with
    code = run_tool(lambda: tool('tools/test.py').main([
        TINY_CONFIG, str(work / 'last_checkpoint'), '--work-dir', str(tmp_path / 'test'),
        *data_options(tiny_demo_data)]))
    assert code == 0, capsys.readouterr().err[-3000:]


def test_refusals_carry_no_advice_of_torch(tmp_path):
    """A damaged file is named with its size and the exception's type; torch's 'Re-running
    torch.load with weights_only set to False ... file an issue' is not repeated."""
    path = tmp_path / 'odd.pth'
    path.write_bytes(b'\x80\x02garbage' * 10)  # a pickle torch's restricted unpickler rejects
    with pytest.raises(CheckpointError) as error:
        load_checkpoint_file(str(path))
    message = str(error.value)
    assert type(error.value) is CheckpointError, message  # damaged, not refused as unsafe
    assert 'Re-running' not in message and 'file an issue' not in message, message
    assert '\n' not in message and f'{path} (90 bytes)' in message, message
    assert 'not a readable PyTorch checkpoint (UnpicklingError)' in message, message

