"""Non-finite numbers: a NaN/Inf loss stops training naming the iteration and the first module with
a non-finite output (before the optimizer step), a loss scaler skips such steps then gives up,
every rank of a distributed run stops, and every mixer stays finite on a large dynamic range under
bf16 autocast.

In-process on the tiny config and on a toy model; the distributed case in two gloo processes.
"""
import glob
import inspect
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.logging import MessageHub
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper
from mmengine.registry import HOOKS
from torch import nn

import afno_seg  # noqa: F401  (registers everything)
from afno_seg.engine import CPUAutocastOptimWrapper, NonFiniteLossError, NonFiniteLossHook
from afno_seg.mixers.catalogue import is_spectral, mixer_classes

from conftest import ROOT, make_runner
from mixer_examples import o1_branch

DTYPES = dict(fp16='float16', bf16='bfloat16')


@HOOKS.register_module(force=True)
class PoisonWeightHook(Hook):
    """Test only: before iteration ``at``, set one weight to +inf."""

    def __init__(self, parameter: str, at: int) -> None:
        self.parameter, self.at = parameter, at

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.at:
            with torch.no_grad():
                runner.model.get_parameter(self.parameter).fill_(float('inf'))


def test_non_finite_loss_stops_naming_iteration_and_module(tiny_demo_data, tmp_path):
    mixer = 'backbone.layers.1.1.0.attn'
    runner = make_runner(tiny_demo_data, tmp_path, **{
        'default_hooks.checkpoint.type': 'AtomicCheckpointHook',
        'default_hooks.checkpoint.interval': 2,
        'custom_hooks': [dict(type='NonFiniteLossHook'),
                         dict(type='PoisonWeightHook', parameter=f'{mixer}.w1', at=3)]})
    with pytest.raises(NonFiniteLossError) as error:
        runner.train()
    message = str(error.value)
    assert message.startswith('non-finite loss at iteration 3 (decode.loss_ce=nan')
    assert f'the first module with a non-finite output is {mixer} (AFNOMixer)' in message
    assert f'last checkpoint: {tmp_path / "iter_2.pth"}. ' in message
    # Stopped before the optimizer step: only the poisoned weight is not finite.
    for name, parameter in runner.model.named_parameters():
        assert torch.isfinite(parameter).all() or name == f'{mixer}.w1', name
    assert sorted(os.listdir(tmp_path)).count('iter_2.pth') == 1
    assert not glob.glob(str(tmp_path / 'iter_4.pth'))


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.factor = 1.0

    def forward(self, x):
        return x * self.factor


class ToyModel(BaseModel):
    """conv -> scale -> BN -> head; ``scale.factor = inf`` makes the loss non-finite."""

    def __init__(self):
        super().__init__()
        self.conv, self.scale = nn.Conv2d(3, 4, 1), Scale()
        self.bn, self.head = nn.BatchNorm2d(4), nn.Conv2d(4, 1, 1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.head(self.bn(self.scale(self.conv(inputs))))
        return dict(loss=out.square().mean()) if mode == 'loss' else out


def toy_setup(precision: str = 'fp32', **hook_args):
    """The toy model, its optimizer wrapper as ``--precision`` builds it on a CPU (fp16: a real
    loss scale), a stand-in runner and the hook."""
    torch.manual_seed(0)
    model = ToyModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    wrapper = OptimWrapper(optimizer=optimizer) if precision == 'fp32' else CPUAutocastOptimWrapper(
        dtype=DTYPES[precision], loss_scale=dict(init_scale=2.0 ** 8), optimizer=optimizer)
    warnings = []
    runner = SimpleNamespace(model=model, optim_wrapper=wrapper, iter=0,
                             logger=SimpleNamespace(warning=warnings.append),
                             message_hub=MessageHub.get_instance('reliability_toy'))
    hook = NonFiniteLossHook(**hook_args)
    hook.before_train(runner)
    batch = dict(inputs=torch.randn(2, 3, 5, 6))
    return model, wrapper, runner, hook, batch, warnings


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_non_finite_loss_without_scaler_raises_before_the_step(precision):
    """bf16: CPUAutocastOptimWrapper with its scaler disabled; nothing would skip the step."""
    model, wrapper, runner, hook, batch, _ = toy_setup(precision)
    model.train_step(batch, wrapper)
    runner.iter = 1
    model.scale.factor = float('inf')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match=r'iteration 2 \(loss=nan\): the first module '
                                                 r'with a non-finite output is scale \(Scale\)'):
        model.train_step(batch, wrapper)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()
               if not k.startswith('bn.'))  # BN may have seen the batch; weights did not move


def test_non_finite_input_batch_is_named():
    model, wrapper, runner, hook, batch, _ = toy_setup()
    batch['inputs'][0, 0, 0, 0] = float('nan')
    with pytest.raises(NonFiniteLossError, match='the input batch itself holds NaN/Inf'):
        model.train_step(batch, wrapper)


def test_loss_scaler_skips_non_finite_steps_then_gives_up():
    model, wrapper, runner, hook, batch, warnings = toy_setup('fp16', max_skipped_in_a_row=2)

    def train_iteration():  # what IterBasedTrainLoop.run_iter does around the hook
        model.train_step(batch, wrapper)
        hook.after_train_iter(runner, runner.iter)
        runner.iter += 1

    train_iteration()
    scale = wrapper.loss_scaler.get_scale()
    model.scale.factor = float('inf')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_iteration()  # skipped: weights unchanged, BatchNorm statistics reset (not NaN)
    assert all(torch.equal(v, before[k]) for k, v in model.named_parameters())
    assert torch.equal(model.bn.running_var, torch.ones(4)) and not model.bn.running_mean.any()
    assert wrapper.loss_scaler.get_scale() == scale / 2
    assert len(warnings) == 1 and 'non-finite loss at iteration 2' in warnings[0]
    assert 'scale (Scale)' in warnings[0]
    assert 'skipped this optimizer step (1 in a row' in warnings[0]
    assert warnings[0].endswith('running statistics reset: bn.')
    model.scale.factor = 1.0
    train_iteration()  # a finite step resets the streak and moves the weights
    assert hook.skipped_in_a_row == 0
    assert not torch.equal(model.conv.weight, before['conv.weight'])
    model.scale.factor = float('inf')
    train_iteration()
    train_iteration()
    with pytest.raises(NonFiniteLossError, match='iteration 6'):
        train_iteration()
    assert hook.skipped_in_a_row == 2


@pytest.mark.parametrize('token_dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('mixer_cls', mixer_classes(), ids=lambda cls: cls.__name__)
def test_mixers_stay_finite_on_large_dynamic_range_under_bf16_autocast(mixer_cls, token_dtype):
    """Tokens with magnitudes from 1e-4 to 1e4 (log-uniform, random signs) on a 7x10 grid. The
    spectral mixers (fp32 islands) stay as accurate as the token dtype allows: float32 exactly,
    bf16 tokens within 0.5% of the largest output (measured at most 0.25%). AFNO's spectral
    branch is O(1) of its output (``o1_branch``): returning the residual alone fails."""
    torch.manual_seed(0)
    height, width, channels = 7, 10, 16
    arguments = dict(embed_dims=channels)
    if 'num_heads' in inspect.signature(mixer_cls).parameters:
        arguments['num_heads'] = 2
    mixer = o1_branch(mixer_cls(**arguments))
    magnitude = torch.exp(torch.empty(2, height * width, channels).uniform_(-9.21, 9.21))
    tokens = magnitude * (torch.randint(0, 2, magnitude.shape) * 2 - 1)
    assert tokens.abs().max() > 5e3 and tokens.abs().min() < 2e-4
    x = tokens.to(token_dtype).requires_grad_(True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = mixer(x, (height, width))
    out.float().square().mean().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters() if p.grad is not None)
    if is_spectral(mixer_cls):  # fp32 islands: as accurate as the token dtype allows
        reference = mixer(x.detach().float(), (height, width))
        error = lambda got: float((got.float() - reference).abs().max()  # noqa: E731
                                  / reference.abs().max())
        tolerance = 1e-6 if token_dtype == torch.float32 else 5e-3
        assert error(out) < tolerance, error(out)
        assert error(x.detach()) > 10 * tolerance  # the mixer dropped: this test fails


DISTRIBUTED_NAN = '''
"""Two gloo processes; rank 1's loss turns NaN at iteration 2. Both must stop, neither hang."""
import os, sys
import torch
import torch.distributed as dist
from types import SimpleNamespace
from mmengine.logging import MessageHub
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
sys.path.insert(0, sys.argv[3])
from test_non_finite import ToyModel
from afno_seg.engine import CPUAutocastOptimWrapper, NonFiniteLossError, NonFiniteLossHook

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[4]
dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
torch.manual_seed(0)
model = MMDistributedDataParallel(module=ToyModel())
wrapper = OptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
runner = SimpleNamespace(model=model, optim_wrapper=wrapper, iter=0, logger=None,
                         message_hub=MessageHub.get_instance(f'dist_nan_{rank}'))
NonFiniteLossHook().before_train(runner)
batch = dict(inputs=torch.randn(2, 3, 5, 6))
model.train_step(batch, wrapper)
runner.iter = 1
if rank == 1:
    model.module.scale.factor = float('inf')
try:
    model.train_step(batch, wrapper)
    message = 'no error'
except NonFiniteLossError as error:
    message = str(error)
with open(out, 'w') as f:
    f.write(message)
# As tools/train.py's torchrun children (engine.runner.run_tool): leave without interpreter
# finalization, where gloo's threads, still held by DDP, can abort the process at exit.
sys.stdout.flush()
os._exit(0)
'''


@pytest.mark.slow
def test_distributed_non_finite_loss_stops_every_rank(tmp_path):
    import socket
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    script = tmp_path / 'distributed_nan.py'
    script.write_text(DISTRIBUTED_NAN)
    outputs = [tmp_path / f'rank{rank}.txt' for rank in (0, 1)]
    processes = [subprocess.Popen([sys.executable, str(script), str(rank), str(port),
                                   str(ROOT / 'tests'), str(outputs[rank])], cwd=ROOT,
                                  env=dict(os.environ, OMP_NUM_THREADS='1'),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for rank in (0, 1)]
    for process in processes:
        try:
            process.wait(timeout=180)
        finally:
            process.kill()
    logs = [process.stdout.read().decode()[-2000:] for process in processes]
    assert all(process.returncode == 0 for process in processes), logs
    rank0, rank1 = (path.read_text() for path in outputs)
    assert rank0.startswith('rank 0: non-finite loss at iteration 2 on another rank (here: loss=')
    assert rank1.startswith('rank 1: non-finite loss at iteration 2 (loss=nan): the first module '
                            'with a non-finite output is scale (Scale)')
