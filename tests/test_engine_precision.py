"""--precision: the choice (auto: fp32 on any CPU, an asked-for fp16/bf16 there warned as
emulated) and its log line, the config it writes, and float16 with a real loss scale on a CPU
(CPUAutocastOptimWrapper + GradScaler('cpu')): an overflow skips the step and halves the scale,
finite steps grow it back, a resume restores it. The memory of a step (afno_seg.analysis.memory):
bytes saved for backward, counted once per storage without the parameters, and the shapes-only
count held to a real step's.
"""
import logging

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper

import afno_seg  # noqa: F401
from afno_seg.analysis.memory import SavedTensorBytes, fake_saved_bytes, step_memory
from afno_seg.engine import UserError
from afno_seg.engine import precision as precision_module
from afno_seg.engine.precision import apply_precision

from conftest import TINY_CONFIG

CONFIGURED = dict(fp16=dict(type='AmpOptimWrapper', loss_scale='dynamic'),
                  bf16=dict(type='AmpOptimWrapper', dtype='bfloat16'),
                  fp32=dict(type='OptimWrapper'))


@pytest.mark.parametrize('requested, configured, cuda, expected', [
    ('auto', 'fp16', False, 'fp32'),  # never an emulated bf16/fp16 unasked
    ('auto', 'bf16', False, 'fp32'),
    ('auto', 'fp32', False, 'fp32'),  # a float32 config stays float32
    ('auto', 'fp16', True, 'fp16'),   # CUDA: the config's
    ('fp16', 'fp32', False, 'fp16'),  # asked: runs, emulated (warned)
    ('bf16', 'fp16', False, 'bf16'),
    ('bf16', 'fp16', True, 'bf16'),
    ('fp32', 'fp16', True, 'fp32'),
    ('fp32', 'fp16', False, 'fp32'),
])
def test_the_choice_and_its_one_line(monkeypatch, requested, configured, cuda, expected):
    logged = []
    monkeypatch.setattr(precision_module, 'print_log',
                        lambda message, **kwargs: logged.append((message, kwargs['level'])))
    cfg = Config(dict(optim_wrapper=dict(CONFIGURED[configured], optimizer=dict(type='SGD'))))
    assert apply_precision(cfg, requested, cuda=cuda) == expected
    [(line, level)] = logged
    assert '\n' not in line and line.startswith(f'[afno_seg] precision {expected} (')
    # a lower precision on a CPU, run or declined, is said to be emulated, as a warning
    lower = expected != 'fp32' or (requested == 'auto' and configured != 'fp32')
    assert ('emulated' in line) == (not cuda and lower)
    assert (level == logging.WARNING) == (expected != configured or 'emulated' in line)
    if requested == 'auto' and expected != configured:
        assert f'--precision {configured} forces it' in line


def test_an_unknown_precision_names_the_choices():
    with pytest.raises(UserError, match='--precision fp8: choose one of auto, fp16, bf16, fp32'):
        apply_precision(Config(dict(optim_wrapper=CONFIGURED['fp16'])), 'fp8', cuda=False)


def amp_config():
    return Config(dict(optim_wrapper=dict(
        type='AmpOptimWrapper', loss_scale='dynamic', optimizer=dict(type='AdamW', lr=1e-3))))


@pytest.mark.parametrize('requested, cuda, wrapper', [
    ('auto', False, dict(type='OptimWrapper')),
    ('fp16', False, dict(type='CPUAutocastOptimWrapper', dtype='float16', loss_scale='dynamic')),
    ('bf16', False, dict(type='CPUAutocastOptimWrapper', dtype='bfloat16')),
    ('bf16', True, dict(type='AmpOptimWrapper', dtype='bfloat16')),
    ('auto', True, dict(type='AmpOptimWrapper', loss_scale='dynamic')),
])
def test_apply_precision_writes_the_wrapper(requested, cuda, wrapper):
    cfg = amp_config()
    apply_precision(cfg, requested, cuda=cuda)
    assert cfg.optim_wrapper.to_dict() == {**wrapper, 'optimizer': dict(type='AdamW', lr=1e-3)}


def tiny_model_and_batch():
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS

    from afno_seg.analysis.memory import random_batch
    cfg = Config.fromfile(TINY_CONFIG)
    cfg.model.backbone.num_layers = [1, 1, 1, 1]
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    return model.train(), random_batch(64, 19, torch.Generator().manual_seed(0))


def fp16_wrapper(model, growth_interval=2):
    return build_optim_wrapper(model, dict(
        type='CPUAutocastOptimWrapper', dtype='float16',
        loss_scale=dict(init_scale=2.0 ** 10, growth_interval=growth_interval),
        optimizer=dict(type='AdamW', lr=1e-3)))


def test_fp16_loss_scale_skips_an_overflow_backs_off_and_grows_back():
    """A MixerMiT segmentor's step under float16 autocast with torch's CPU GradScaler."""
    model, batch = tiny_model_and_batch()
    wrapper = fp16_wrapper(model, growth_interval=2)
    dtypes = set()
    patch_embed = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    handle = patch_embed.register_forward_hook(lambda module, args, out: dtypes.add(out.dtype))
    model.train_step(batch, wrapper)
    handle.remove()
    scaler = wrapper.loss_scaler
    assert scaler.get_scale() == 2.0 ** 10 and scaler._growth_tracker == 1
    weight = model.decode_head.conv_seg.weight
    overflow = weight.register_hook(lambda grad: grad * float('inf'))
    before = {k: v.clone() for k, v in model.named_parameters()}
    model.train_step(batch, wrapper)  # the gradients hold inf: no optimizer step
    overflow.remove()
    assert all(torch.equal(v, before[k]) for k, v in model.named_parameters())
    assert scaler.get_scale() == 2.0 ** 9 and scaler._growth_tracker == 0
    model.train_step(batch, wrapper)
    assert scaler.get_scale() == 2.0 ** 9  # one finite step: not yet
    assert not torch.equal(weight, before['decode_head.conv_seg.weight'])
    model.train_step(batch, wrapper)
    assert scaler.get_scale() == 2.0 ** 10  # growth_interval finite steps: doubled
    assert dtypes == {torch.float16}  # the lower precision actually ran


def test_resume_restores_the_loss_scale_exactly(tmp_path):
    """Through a checkpoint file read with weights_only=True (what the safe loader does)."""
    model, batch = tiny_model_and_batch()
    wrapper = fp16_wrapper(model, growth_interval=3)
    for _ in range(2):
        model.train_step(batch, wrapper)
    torch.save(dict(optimizer=wrapper.state_dict()), tmp_path / 'iter_2.pth')
    state = torch.load(tmp_path / 'iter_2.pth', weights_only=True)['optimizer']
    assert state['loss_scaler']['_growth_tracker'] == 2
    resumed = fp16_wrapper(model, growth_interval=3)
    resumed.load_state_dict(state)
    assert resumed.loss_scaler.get_scale() == wrapper.loss_scaler.get_scale()
    model.train_step(batch, resumed)  # the third finite step in a row: grows, as uninterrupted
    assert resumed.loss_scaler.get_scale() == 2 * wrapper.loss_scaler.get_scale()


def test_bf16_wrapper_has_no_scale_and_resumes():
    model = torch.nn.Linear(4, 2)
    config = dict(type='CPUAutocastOptimWrapper', dtype='bfloat16',
                  optimizer=dict(type='SGD', lr=0.1, momentum=0.9))
    wrapper = build_optim_wrapper(model, config)
    with wrapper.optim_context(model):
        out = model(torch.randn(3, 4))
    assert out.dtype == torch.bfloat16 and not wrapper.loss_scaler.is_enabled()
    wrapper.update_params(out.float().sum())
    resumed = build_optim_wrapper(model, config)
    resumed.load_state_dict(wrapper.state_dict())  # its empty scaler state included
    assert resumed.state_dict()['state'][0]['momentum_buffer'].equal(
        wrapper.state_dict()['state'][0]['momentum_buffer'])


def test_saved_bytes_count_each_storage_once_without_parameters():
    weight = torch.nn.Parameter(torch.randn(8, 3))
    x = torch.randn(5, 8, requires_grad=True)
    counter = SavedTensorBytes([weight])
    with counter:
        y = x.sigmoid()   # saves y
        z = y * y         # saves y twice: counted once
        (z @ weight).sum()  # saves z and the weight: the weight is a parameter
    assert counter.bytes == 2 * 5 * 8 * 4
    with torch.no_grad(), counter:
        x.sigmoid()
    assert counter.bytes == 2 * 5 * 8 * 4  # nothing saved without a graph


@pytest.mark.parametrize('precision', ['fp32', 'fp16'])
def test_shapes_only_count_matches_a_real_step(precision):
    """FakeTensorMode (no arithmetic) counts what a real train_step saves, under autocast too."""
    from mmengine.optim import build_optim_wrapper
    model, batch = tiny_model_and_batch()
    wrapper = build_optim_wrapper(model, dict(
        type='OptimWrapper' if precision == 'fp32' else 'CPUAutocastOptimWrapper',
        **({} if precision == 'fp32' else dict(dtype='float16')),
        optimizer=dict(type='AdamW', lr=1e-3)))
    real = step_memory(lambda: model.train_step(batch, wrapper), model, torch.device('cpu'))
    fake = fake_saved_bytes(model, 64, 1, precision)
    assert real['peak_bytes'] > real['saved_bytes'] > 0
    # mmseg's accuracy (left out of the fake forward) saves the top-1 indices, 64 x 64 int64,
    # and a few small tensors: 2.2% of this tiny model's total (measured), 0.2% at B3 1024.
    assert fake < real['saved_bytes'] < 1.03 * fake, (real['saved_bytes'], fake)
