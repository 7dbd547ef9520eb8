"""A checkpoint that does not fit its model is refused, naming what differs: mmengine loads with
``strict=False`` and only warns, so a wrong file would evaluate or export random weights."""
import re
from dataclasses import dataclass, field

from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.runner import find_latest_checkpoint, load_state_dict
from torch import nn

from .checkpoint import state_dict_of
from .errors import UserError

__all__ = ['CheckpointFitHook', 'CheckpointMismatchError', 'FitReport', 'fit_report', 'load_state',
           'mixer_prefixes']

TRAINED_ADVICE = ('Pass the checkpoint trained with this config (or the config it was trained '
                  'with); a config may list tensors it expects to be new in checkpoint_new_keys.')


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint that does not hold the model's tensors."""


@dataclass
class FitReport:
    """Model keys by fate; ``new``/``unused``: under the optional prefixes, not loaded."""
    total: int
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    mismatched: list = field(default_factory=list)
    new: list = field(default_factory=list)
    unused: list = field(default_factory=list)


def fit_report(model: nn.Module, state: dict, source: str, new_prefixes=(), meta=None,
               advice: str = TRAINED_ADVICE) -> FitReport:
    """``model.state_dict()`` against ``state`` (of ``source``) by names and shapes; tensors under
    ``new_prefixes`` may be absent, of another shape or extra. Raises
    :class:`CheckpointMismatchError` unless all others fit (``meta``: the checkpoint's)."""
    own, optional = model.state_dict(), tuple(new_prefixes or ())
    report = FitReport(total=len(own))
    for key, value in own.items():
        theirs = state.get(key)
        if theirs is not None and theirs.shape == value.shape:
            report.loaded.append(key)
        elif key.startswith(optional):
            report.new.append(key)
            if theirs is not None:
                report.unused.append(key)
        elif theirs is None:
            report.missing.append(key)
        else:
            report.mismatched.append((key, tuple(theirs.shape), tuple(value.shape)))
    for key in (key for key in state if key not in own):
        (report.unused if key.startswith(optional) else report.unexpected).append(key)
    if not report.loaded or report.missing or report.unexpected or report.mismatched:
        raise CheckpointMismatchError(f'{_describe(report, model, state, source, meta)} {advice}')
    return report


def mixer_prefixes(model: nn.Module) -> tuple[str, ...]:
    """The key prefix of every token mixer of ``model`` (found by type, whatever the layout)."""
    from ..mixers.base import TokenMixer
    return tuple(f'{name}.' for name, module in model.named_modules()
                 if isinstance(module, TokenMixer))


def _describe(report: FitReport, model: nn.Module, state: dict, source: str, meta) -> str:
    """Counts, missing groups (mixers: held vs built), the run its meta names (text, never run)."""
    prefixes, groups, problems = mixer_prefixes(model), {}, []
    for key in report.missing:
        group = 'backbone mixers' if key.startswith(prefixes) else key.split('.')[0]
        groups.setdefault(group, []).append(key)
    for group, keys in groups.items():
        problems.append(f'{group}: {len(keys)} missing (e.g. {keys[0]})')
        if group == 'backbone mixers':
            held = sorted({'attn.' + re.sub(r'[._](weight|bias)$', '', key[len(prefix):])
                           for key in state for prefix in prefixes if key.startswith(prefix)})
            types = dict.fromkeys(type(model.get_submodule(p[:-1])).__name__ for p in prefixes)
            problems[-1] += (f'; the checkpoint holds mixer tensors {", ".join(held[:6]) or "none"}'
                             f'{", ..." if held[6:] else ""}, the config builds {", ".join(types)}')
    if report.mismatched:
        key, theirs, ours = report.mismatched[0]
        problems.append(f'{len(report.mismatched)} of other shape (e.g. {key}: checkpoint '
                        f'{theirs}, model {ours})')
    if report.unexpected:
        problems.append(f'{len(report.unexpected)} not in the model (e.g. {report.unexpected[0]})')
    found = len(report.loaded)
    text = (f'checkpoint {source} {"does not fit" if found else "holds no tensor of"} this '
            f'model: found {found} of the model\'s {report.total} tensors; '
            f'{"; ".join(problems) or "empty state dict"}.')
    name = meta.get('experiment_name') if isinstance(meta, dict) else None
    if isinstance(name, str):  # mmengine's meta: the run's name and its config as text
        from ..mixers.catalogue import registered_mixers
        config = str(meta.get('cfg') or meta.get('config_text') or '')
        used = [t for t in dict.fromkeys(re.findall(r"type\s*=\s*['\"](\w+)['\"]", config))
                if t in registered_mixers()]
        name = re.sub(r'_\d{8}_\d{6}$', '', name)  # the run's timestamp
        text += f' Its meta says it was trained with {name}' + (
            f' (mixers {", ".join(used)}).' if used else '.')
    return text


def load_state(model: nn.Module, state: dict, source: str, new_prefixes=(), meta=None,
               advice: str = TRAINED_ADVICE) -> FitReport:
    """Load ``state`` (in the model's names) if it fits (:func:`fit_report`); mmengine's
    ``load_state_dict`` logs the tensors not loaded by name (a transplant's new mixers)."""
    report = fit_report(model, state, source, new_prefixes, meta, advice)
    load_state_dict(model, state, strict=False, logger='current')
    return report


class CheckpointFitHook(Hook):
    """Refuses a checkpoint the Runner loads (``load_from``, ``--resume``: evaluation) that does
    not fit its model (:func:`fit_report`)."""
    priority = 'VERY_HIGH'

    def __init__(self, new_prefixes=()):
        self.new_prefixes = tuple(new_prefixes or ())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        model = model.module if isinstance(model, BaseTTAModel) else model
        # what mmengine's load_or_resume reads: load_from, else the work_dir's last_checkpoint
        source = runner.cfg.get('load_from') or find_latest_checkpoint(runner.work_dir)
        fit_report(model, state_dict_of(checkpoint), source, self.new_prefixes,
                   checkpoint.get('meta'))
