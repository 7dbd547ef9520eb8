"""A checkpoint that does not fit its model is refused, naming what differs (mmengine warns)."""
import re

from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.runner import find_latest_checkpoint, load_state_dict
from torch import nn

from .checkpoint import state_dict_of
from .errors import UserError

__all__ = ['CheckpointFitHook', 'CheckpointMismatchError', 'check_fit', 'load_state',
           'mixer_prefixes']

TRAINED_ADVICE = ('Pass the checkpoint trained with this config (or the config it was trained '
                  'with); a config may list tensors it expects to be new in checkpoint_new_keys.')


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint that does not hold the model's tensors."""


def check_fit(model: nn.Module, state: dict, source: str, new_prefixes=(), meta=None,
              advice: str = TRAINED_ADVICE) -> None:
    """:class:`CheckpointMismatchError` unless ``state`` (of ``source``, with ``meta``) holds the
    tensors of ``model`` by name and shape, nothing else; ones under ``new_prefixes`` may differ."""
    own, optional = model.state_dict(), tuple(new_prefixes or ())
    fits = {key for key, value in own.items() if key in state and state[key].shape == value.shape}
    missing = [key for key in own if key not in state and not key.startswith(optional)]
    mismatched = [(key, tuple(state[key].shape), tuple(value.shape)) for key, value in own.items()
                  if key in state and key not in fits and not key.startswith(optional)]
    unexpected = [key for key in state if key not in own and not key.startswith(optional)]
    if not fits or missing or mismatched or unexpected:
        prefixes, groups, problems = mixer_prefixes(model), {}, []
        for key in missing:
            group = 'backbone mixers' if key.startswith(prefixes) else key.split('.')[0]
            groups.setdefault(group, []).append(key)
        for group, keys in groups.items():
            problems.append(f'{group}: {len(keys)} missing (e.g. {keys[0]})')
            if group == 'backbone mixers':  # what the checkpoint holds there, what we build
                held = sorted({'attn.' + re.sub(r'[._](weight|bias)$', '', key[len(prefix):])
                               for key in state for prefix in prefixes if key.startswith(prefix)})
                types = dict.fromkeys(type(model.get_submodule(p[:-1])).__name__ for p in prefixes)
                problems[-1] += (f'; the checkpoint holds mixer tensors '
                                 f'{", ".join(held[:6]) or "none"}{", ..." if held[6:] else ""}, '
                                 f'the config builds {", ".join(types)}')
        if mismatched:
            key, theirs, ours = mismatched[0]
            problems.append(f'{len(mismatched)} of other shape (e.g. {key}: checkpoint {theirs}, '
                            f'model {ours})')
        if unexpected:
            problems.append(f'{len(unexpected)} not in the model (e.g. {unexpected[0]})')
        raise CheckpointMismatchError(
            f'checkpoint {source} {"does not fit" if fits else "holds no tensor of"} this model: '
            f'found {len(fits)} of the model\'s {len(own)} tensors; '
            f'{"; ".join(problems) or "empty state dict"}.{_trained_with(meta)} {advice}')


def mixer_prefixes(model: nn.Module) -> tuple[str, ...]:
    """The key prefix of every token mixer of ``model`` (found by type, whatever the layout)."""
    from ..mixers.base import TokenMixer
    return tuple(f'{name}.' for name, module in model.named_modules()
                 if isinstance(module, TokenMixer))


def _trained_with(meta) -> str:
    """The run and mixers an mmengine checkpoint's meta names (its config as text, never run)."""
    name = meta.get('experiment_name') if isinstance(meta, dict) else None
    if not isinstance(name, str):
        return ''
    from ..mixers.catalogue import registered_mixers
    config = str(meta.get('cfg') or meta.get('config_text') or '')
    used = [t for t in dict.fromkeys(re.findall(r"type\s*=\s*['\"](\w+)['\"]", config))
            if t in registered_mixers()]
    name = re.sub(r'_\d{8}_\d{6}$', '', name)  # the run's timestamp
    return f' Its meta says it was trained with {name}' + (
        f' (mixers {", ".join(used)}).' if used else '.')


def load_state(model: nn.Module, state: dict, source: str, new_prefixes=(), meta=None,
               advice: str = TRAINED_ADVICE) -> None:
    """Load ``state`` (in the model's names) if it fits (:func:`check_fit`), logging new tensors."""
    check_fit(model, state, source, new_prefixes, meta, advice)
    load_state_dict(model, state, strict=False, logger='current')


class CheckpointFitHook(Hook):
    """Refuses a checkpoint the Runner loads (``load_from``, ``--resume``) that does not fit."""
    priority = 'VERY_HIGH'

    def __init__(self, new_prefixes=()):
        self.new_prefixes = tuple(new_prefixes or ())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        model = model.module if isinstance(model, BaseTTAModel) else model
        # what mmengine's load_or_resume reads: load_from, else the work_dir's last_checkpoint
        source = runner.cfg.get('load_from') or find_latest_checkpoint(runner.work_dir)
        check_fit(model, state_dict_of(checkpoint), source, self.new_prefixes,
                  checkpoint.get('meta'))
