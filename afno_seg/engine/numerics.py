"""A NaN/Inf loss stops training before the optimizer step, naming the iteration and the first
module whose output went non-finite (mmengine trains through it, writing NaN into every weight).

:class:`NonFiniteLossHook` keeps a device flag of this rank's loss: no collective per step, and
one host sync just before the optimizer step (a step pre-hook), none under a loss scale, whose
``GradScaler`` skips non-finite steps itself (a skipped step runs no step hook); the hook counts
skips, resets BatchNorm statistics the bad pass made non-finite, and stops after
``max_skipped_in_a_row``. Distributed, a rank whose loss is not finite multiplies it by NaN, so
DDP's gradient average tells every rank: all stop or skip together and re-run their pass with
the same dropout masks (SyncBN needs all) to name the module (:func:`find_first_non_finite`).
docs/reliability.md, "NaN and Inf".
"""
from functools import partial

import torch
from mmengine.dist import all_reduce, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapperDict
from mmengine.registry import HOOKS

from .errors import UserError
from .random_state import set_random_state, torch_random_state

__all__ = ['NonFiniteLossError', 'NonFiniteLossHook', 'find_first_non_finite']


class NonFiniteLossError(UserError, FloatingPointError):
    """The training loss became NaN or Inf; the message names the iteration and the module."""


def _tensors(value):
    """Yield the floating-point tensors in a (nested) module input or output."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _tensors(item)


def _all_finite(value) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _tensors(value))


def _max_abs(value) -> float:
    return max((float(t.detach().abs().max()) for t in _tensors(value) if t.numel()), default=0.)


def find_first_non_finite(model: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    """Run ``model(*args, **kwargs)`` without gradients; describe the first non-finite output."""
    if not _all_finite((args, kwargs)):
        return 'the input batch itself holds NaN/Inf values (check the data and the pipeline)'
    found = []

    def check(name, module, inputs, output):
        if not found and not _all_finite(output):
            dtypes = sorted({str(t.dtype).replace('torch.', '') for t in _tensors(output)})
            inputs_ok = 'finite' if _all_finite(inputs) else 'NOT finite'
            found.append(f'{name} ({type(module).__name__}): output dtype {"/".join(dtypes)}, '
                         f'its inputs {inputs_ok} with max |x| = {_max_abs(inputs):.3g}')

    handles = [module.register_forward_hook(partial(check, name))
               for name, module in model.named_modules() if name]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    if found:
        return f'the first module with a non-finite output is {found[0]}'
    return ('no module output was non-finite on a re-run: the loss computation itself '
            '(e.g. the decode head\'s loss_by_feat) produced it')


def _loss_terms(losses: dict) -> dict:
    """Each ``loss`` entry (a tensor or a list of them, as mmengine's ``parse_losses`` requires)
    as one scalar."""
    tensors = {name: list(_tensors(value)) for name, value in losses.items() if 'loss' in name}
    return {name: sum(v.detach().float().mean() for v in values)
            for name, values in tensors.items() if values}


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Stop (or, under a loss scaler, skip) on a non-finite loss; name the module that caused it.

    Args:
        max_skipped_in_a_row (int): Under a loss scaler, how many consecutive steps with a
            non-finite loss the scaler may skip before training stops. Default: 10.
    """

    priority = 'VERY_HIGH'  # after_train_iter: before the CheckpointHook saves

    def __init__(self, max_skipped_in_a_row: int = 10) -> None:
        self.max_skipped_in_a_row = max_skipped_in_a_row
        self.skipped_in_a_row = self.skipped_total = 0
        self._handles, self._locating, self._stepped = [], False, False
        self._last = None  # (args, kwargs, torch random state) of the last training pass
        self._terms = self._bad = None  # its loss terms; a device flag since the last step

    def before_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        wrappers = runner.optim_wrapper
        wrappers = wrappers.values() if isinstance(wrappers, OptimWrapperDict) else [wrappers]
        self._runner, self._model = runner, model
        self._handles = [model.register_forward_pre_hook(self._remember, with_kwargs=True),
                         model.register_forward_hook(self._check, with_kwargs=True)] + [
            wrapper.optimizer.register_step_pre_hook(self._before_step) for wrapper in wrappers]

    def after_train(self, runner) -> None:
        while self._handles:
            self._handles.pop().remove()

    def _scaling(self) -> bool:
        scaler = getattr(self._runner.optim_wrapper, 'loss_scaler', None)
        return scaler is not None and getattr(scaler, 'is_enabled', lambda: True)()

    def _remember(self, model, args, kwargs):
        if model.training and not self._locating and kwargs.get('mode') == 'loss':
            self._last = (args, kwargs, torch_random_state())

    def _check(self, model, args, kwargs, output):
        if self._locating or not model.training or not isinstance(output, dict):
            return None
        terms = _loss_terms(output)
        if not terms:
            return None
        bad = torch.stack([~torch.isfinite(v) for v in terms.values()]).any()
        self._terms, self._bad = terms, bad if self._bad is None else self._bad | bad
        if get_world_size() == 1:
            return None
        # x NaN makes every gradient of this rank NaN, so every rank's averaged gradient is
        # non-finite: the news travels in DDP's all-reduce (a finite loss is multiplied by 1).
        factor = torch.where(bad, float('nan'), 1.0)
        return {name: (value * factor if isinstance(value, torch.Tensor) else
                       [item * factor for item in value]) if name in terms else value
                for name, value in output.items()}

    def _before_step(self, optimizer, args, kwargs) -> None:
        self._stepped = True  # under a scaler: it found the gradients finite
        bad, self._bad = self._bad, None
        if bad is None or self._scaling():
            return
        if get_world_size() > 1:  # another rank's non-finite loss: a NaN gradient here
            grad = next((p.grad for group in optimizer.param_groups for p in group['params']
                         if p.grad is not None), None)
            bad = bad if grad is None else bad | ~torch.isfinite(grad.view(-1)[0])
        if bool(bad):  # the one host sync a step needs: the step must not run
            raise NonFiniteLossError(self._stop_message())

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        stepped, self._stepped = self._stepped, False
        if not self._scaling() or not runner.optim_wrapper.should_update():
            return
        bad, self._bad = self._bad, None
        if stepped:
            self.skipped_in_a_row = 0
            return
        # The scaler skipped this step on every rank (their gradients are the same): agree on
        # whether a loss was non-finite somewhere; a skip with finite losses is a scale back-off.
        flag = torch.zeros(()) if bad is None else bad.float()
        all_reduce(flag, op='max')
        if not bool(flag):
            return
        if self.skipped_in_a_row >= self.max_skipped_in_a_row:
            raise NonFiniteLossError(self._stop_message())
        self.skipped_in_a_row += 1
        self.skipped_total += 1
        message = self._describe()
        reset = [name for name, module in self._model.named_modules()
                 if hasattr(module, 'reset_running_stats')
                 and not _all_finite(list(module.buffers(recurse=False)))]
        for name in reset:  # NaN statistics stay NaN for good: re-estimated from the next batches
            self._model.get_submodule(name).reset_running_stats()
        runner.logger.warning(
            f'{message} The loss scaler skipped this optimizer step ({self.skipped_in_a_row} in '
            f'a row, {self.skipped_total} in this run)' +
            (f'; running statistics reset: {", ".join(reset)}.' if reset else '.'))

    def _stop_message(self) -> str:
        last = self._runner.message_hub.get_info('last_ckpt', None)
        return (f'{self._describe()} Training stopped before this iteration\'s optimizer step '
                '(the weights are as the previous iteration left them); ' +
                (f'the last checkpoint is {last}. ' if last else 'no checkpoint yet. ') +
                'Lower the learning rate or warm it up longer, clip gradients '
                '(optim_wrapper.clip_grad=dict(max_norm=1.0)), or fix the data, then --resume.')

    def _describe(self) -> str:
        iteration = self._runner.iter + 1
        terms = self._terms or {}
        values = ', '.join(f'{name}={float(value):.4g}' for name, value in terms.items())
        where = 'rank ' + str(get_rank()) + ': ' if get_world_size() > 1 else ''
        args, kwargs, random_state = self._last
        state_now = torch_random_state()
        self._locating = True
        try:  # on every rank, even one whose loss is finite: SyncBN waits for all
            set_random_state(random_state)  # the same dropout masks as the failing pass
            culprit = find_first_non_finite(self._model, args, kwargs)
        finally:
            self._locating = False
            set_random_state(state_now)
        if all(bool(torch.isfinite(v)) for v in terms.values()):
            return (f'{where}non-finite loss at iteration {iteration} on another rank '
                    f'(here: {values}).')
        return f'{where}non-finite loss at iteration {iteration} ({values}): {culprit}.'
