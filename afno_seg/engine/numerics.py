"""``NonFiniteLossHook``: a NaN/Inf loss stops training, naming the iteration and the module.

mmengine trains straight through a NaN loss: the optimizer writes NaN into every weight and the
next checkpoint saves them. The hook checks the summed loss terms of every training forward pass
before the backward pass; on a non-finite one it re-runs that pass without gradients, from the
same generator state, and names the first module (in execution order) whose output is not finite
(:func:`find_first_non_finite`). Without a loss scaler it raises :class:`NonFiniteLossError`
before the optimizer step. Under one (fp16) it logs, lets the ``GradScaler`` skip the step and
restores the buffers (BatchNorm statistics) the bad pass changed; more than
``max_skipped_in_a_row`` skips raise. The flag is all-reduced so every rank stops or skips
together, and every rank re-runs its pass (SyncBN needs all). docs/reliability.md, "NaN and Inf".
"""
from functools import partial

import torch
from mmengine.dist import all_reduce, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
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
        max_skipped_in_a_row (int): Under a loss scaler, how many consecutive non-finite losses
            to let the scaler skip before stopping. Default: 10.
    """

    priority = 'VERY_HIGH'

    def __init__(self, max_skipped_in_a_row: int = 10) -> None:
        self.max_skipped_in_a_row = max_skipped_in_a_row
        self.skipped_in_a_row = 0
        self.skipped_total = 0
        self._handles = []
        self._locating = False
        self._before = None
        self._restore_buffers = False

    def before_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        self._runner, self._model = runner, model
        self._handles = [model.register_forward_pre_hook(self._remember, with_kwargs=True),
                         model.register_forward_hook(self._check, with_kwargs=True)]

    def after_train(self, runner) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        # VERY_HIGH priority: before the CheckpointHook saves and before validation.
        if self._restore_buffers:
            saved = (self._before or {}).get('buffers', {})
            with torch.no_grad():
                for name, buffer in self._model.named_buffers():
                    if name in saved:
                        buffer.copy_(saved[name])
            self._restore_buffers = False

    def _scaling(self) -> bool:
        scaler = getattr(self._runner.optim_wrapper, 'loss_scaler', None)
        return scaler is not None and getattr(scaler, 'is_enabled', lambda: True)()

    def _remember(self, model, args, kwargs):
        if model.training and not self._locating and kwargs.get('mode') == 'loss':
            self._before = dict(random=torch_random_state())
            if self._scaling():  # only needed to undo a skipped step's BN updates
                self._before['buffers'] = {n: b.detach().clone() for n, b in model.named_buffers()}

    def _check(self, model, args, kwargs, output):
        if self._locating or not model.training or not isinstance(output, dict):
            return None
        terms = _loss_terms(output)
        if not terms:
            return None
        bad = torch.stack([~torch.isfinite(v) for v in terms.values()]).any().float()
        all_reduce(bad)  # every rank takes the same branch below (mmengine's: alone, a no-op)
        if not bool(bad):
            self.skipped_in_a_row = 0
            return None
        message = self._describe(model, args, kwargs, terms)
        if self._scaling() and self.skipped_in_a_row < self.max_skipped_in_a_row:
            self.skipped_in_a_row += 1
            self.skipped_total += 1
            self._restore_buffers = True  # after the backward pass, which still needs them
            self._runner.logger.warning(
                f'{message} The loss scaler skips this optimizer step ({self.skipped_in_a_row} '
                f'in a row, {self.skipped_total} in this run).')
            return None
        last = self._runner.message_hub.get_info('last_ckpt', None)
        raise NonFiniteLossError(
            f'{message} Training stopped before this iteration\'s optimizer step (the weights '
            'are as the previous iteration left them); ' +
            (f'the last checkpoint is {last}. ' if last else 'no checkpoint yet. ') +
            'Lower the learning rate or warm it up longer, clip gradients '
            '(optim_wrapper.clip_grad=dict(max_norm=1.0)), or fix the data, then --resume.')

    def _describe(self, model, args, kwargs, terms) -> str:
        iteration = self._runner.iter + 1
        values = ', '.join(f'{name}={float(value):.4g}' for name, value in terms.items())
        where = 'rank ' + str(get_rank()) + ': ' if get_world_size() > 1 else ''
        # Every rank re-runs its forward pass, even one whose loss is finite: SyncBN layers
        # would otherwise wait for the ranks that do.
        state_now = torch_random_state()
        self._locating = True
        try:
            if self._before is not None:  # the same dropout masks as the failing pass
                set_random_state(self._before['random'])
            culprit = find_first_non_finite(model, args, kwargs)
        finally:
            self._locating = False
            set_random_state(state_now)
        if all(bool(torch.isfinite(v)) for v in terms.values()):
            return (f'{where}non-finite loss at iteration {iteration} on another rank '
                    f'(here: {values}).')
        return f'{where}non-finite loss at iteration {iteration} ({values}): {culprit}.'
