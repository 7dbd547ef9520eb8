"""A NaN/Inf loss stops training before its optimizer step, naming the module that made it."""
from functools import partial

import torch
from mmengine.dist import all_reduce, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from .errors import UserError
from .random_state import set_random_state, torch_random_state

__all__ = ['NonFiniteLossError', 'NonFiniteLossHook']


class NonFiniteLossError(UserError, FloatingPointError):
    """The training loss became NaN or Inf; the message names the iteration and the module."""


def _tensors(value) -> list:
    """The floating-point tensors in a (nested) module input or output."""
    if isinstance(value, (list, tuple, dict)):
        return [t for item in (value.values() if isinstance(value, dict) else value)
                for t in _tensors(item)]
    floating = isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())
    return [value] if floating else []


def _all_finite(value) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _tensors(value))


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Stop (or, under a loss scaler, skip) on a non-finite loss; name the module that caused it.

    Args:
        max_skipped_in_a_row (int): Under a loss scaler, how many steps in a row with a
            non-finite loss may be skipped before training stops. Default: 10.
    """

    priority = 'VERY_HIGH'  # after_train_iter: before the CheckpointHook saves

    def __init__(self, max_skipped_in_a_row: int = 10) -> None:
        self.max_skipped_in_a_row = max_skipped_in_a_row
        self.skipped_in_a_row = 0
        self._handles = []
        self._last = self._terms = self._bad = None  # last pass's inputs, its loss terms, a flag

    def before_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        scaler = getattr(runner.optim_wrapper, 'loss_scaler', None)  # (AmpOptimWrapper's)
        self._runner, self._model, self._scaling = runner, model, scaler and scaler.is_enabled()
        self._handles = [model.register_forward_pre_hook(self._remember, with_kwargs=True),
                         model.register_forward_hook(self._check, with_kwargs=True),
                         runner.optim_wrapper.optimizer.register_step_pre_hook(self._before_step)]

    def after_train(self, runner) -> None:
        for handle in self._handles:
            handle.remove()

    def _remember(self, model, args, kwargs):
        if model.training and torch.is_grad_enabled() and kwargs.get('mode') == 'loss':
            self._last = (args, kwargs, torch_random_state())

    def _check(self, model, args, kwargs, output):
        # not in the re-run of _describe (no gradients); a loss: a tensor or a list of them
        if not (model.training and torch.is_grad_enabled() and isinstance(output, dict)):
            return None
        terms = {name: sum(t.detach().float().mean() for t in _tensors(value))
                 for name, value in output.items() if 'loss' in name and _tensors(value)}
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
        bad, self._bad = self._bad, None  # None after the step: it ran (a scaler found it finite)
        if bad is None or self._scaling:
            return
        if get_world_size() > 1:  # another rank's non-finite loss: a NaN gradient here
            grad = next((p.grad for group in optimizer.param_groups for p in group['params']
                         if p.grad is not None), None)
            bad = bad if grad is None else bad | ~torch.isfinite(grad.view(-1)[0])
        if bool(bad):  # the one host sync a step needs: the step must not run
            raise NonFiniteLossError(self._describe(stop=True))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not self._scaling or not runner.optim_wrapper.should_update():
            return
        bad, self._bad = self._bad, None
        if bad is None:  # the step ran
            self.skipped_in_a_row = 0
            return
        # Skipped on every rank (same gradients): a non-finite loss somewhere, or a scale back-off?
        all_reduce(flag := bad.float(), op='max')
        if not bool(flag):
            return
        if self.skipped_in_a_row >= self.max_skipped_in_a_row:
            raise NonFiniteLossError(self._describe(stop=True))
        self.skipped_in_a_row += 1
        message = self._describe(stop=False)
        reset = [name for name, module in self._model.named_modules()
                 if hasattr(module, 'reset_running_stats')
                 and not _all_finite(list(module.buffers(recurse=False)))]
        for name in reset:  # NaN statistics stay NaN for good: re-estimated from the next batches
            self._model.get_submodule(name).reset_running_stats()
        reset_note = f'; running statistics reset: {", ".join(reset)}' if reset else ''
        runner.logger.warning(f'{message} The loss scaler skipped this optimizer step '
                              f'({self.skipped_in_a_row} in a row){reset_note}.')

    def _describe(self, stop: bool) -> str:
        """Re-run the last pass, its inputs and dropout masks, to name the first module whose
        output is not finite: on every rank, even one whose loss is finite (SyncBN waits)."""
        args, kwargs, random_state = self._last
        found, state_now = [], torch_random_state()

        def check(name, module, inputs, output):
            if not found and not _all_finite(output):
                found.append(f'{name} ({type(module).__name__}), its inputs '
                             f'{"" if _all_finite(inputs) else "NOT "}finite')

        handles = [module.register_forward_hook(partial(check, name))
                   for name, module in self._model.named_modules() if name]
        try:
            set_random_state(random_state)
            with torch.no_grad():
                self._model(*args, **kwargs)
        finally:
            set_random_state(state_now)
            for handle in handles:
                handle.remove()
        values = ', '.join(f'{name}={float(value):.4g}' for name, value in self._terms.items())
        culprit = ('the input batch itself holds NaN/Inf values (check the data and pipeline)'
                   if not _all_finite((args, kwargs)) else
                   f'the first module with a non-finite output is {found[0]}' if found else
                   'no module output was non-finite on a re-run: the loss computation made it')
        message = (f'{f"rank {get_rank()}: " if get_world_size() > 1 else ""}non-finite loss at '
                   f'iteration {self._runner.iter + 1}' + (
                       f' on another rank (here: {values}).' if _all_finite(self._terms)
                       else f' ({values}): {culprit}.'))
        last = self._runner.message_hub.get_info('last_ckpt') or 'none yet'
        return message if not stop else (
            f'{message} Training stopped before this iteration\'s optimizer step (the weights '
            f'are as the previous iteration left them); last checkpoint: {last}. Lower the '
            'learning rate or warm it up longer, clip gradients (optim_wrapper.clip_grad='
            'dict(max_norm=1.0)), or fix the data, then --resume.')
