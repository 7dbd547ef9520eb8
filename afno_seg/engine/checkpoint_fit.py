"""Does a checkpoint fit the model? The one check of every state dict loaded into a model.

mmengine loads with ``strict=False`` and warns, so a wrong file (another mixer's checkpoint, an
empty state dict) runs with random weights. One comparison of names and shapes,
:func:`fit_report`, serves every route: evaluation, inference, export and analysis need every
tensor and no other (:func:`load_weights`, :class:`CheckpointFitHook`; a config may list prefixes
expected new in ``checkpoint_new_keys``); a pretrained backbone, after its key remap, loads where
name and shape match (:func:`load_state`); fine-tuning loads what fits, with one line
(:func:`log_fit`). A refusal (:class:`CheckpointMismatchError`) names counts, missing groups, the
mixer tensors the file holds instead, and the config it was trained with when its meta has it.
"""
import logging
import re
from dataclasses import dataclass, field

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from torch import nn

from .checkpoint import load_checkpoint_file, state_dict_of
from .errors import UserError

__all__ = ['CheckpointFitHook', 'CheckpointMismatchError', 'FitReport', 'check_fit', 'compact',
           'fit_report', 'load_state', 'load_weights', 'log_fit', 'mixer_prefixes']

_TIMESTAMP = re.compile(r'_\d{8}_\d{6}$')
TRAINED_ADVICE = ('Pass the checkpoint trained with this config (or the config it was trained '
                  'with); a config may list tensors it expects to be new in checkpoint_new_keys.')


class CheckpointMismatchError(UserError, RuntimeError):
    """A checkpoint that does not hold the model's tensors."""


@dataclass
class FitReport:
    """Keys of the model's state dict against a checkpoint's; ``new``/``unused``: model /
    checkpoint tensors under the optional prefixes that are not loaded."""
    total: int
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    mismatched: list = field(default_factory=list)  # (key, checkpoint shape, model shape)
    new: list = field(default_factory=list)
    unused: list = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return bool(self.loaded) and not (self.missing or self.unexpected or self.mismatched)


def fit_report(model: nn.Module, state: dict, new_prefixes=()) -> FitReport:
    """Compare ``model.state_dict()`` (names and shapes) with ``state``; tensors under
    ``new_prefixes`` may be absent, of another shape or extra on either side."""
    own = model.state_dict()
    optional = tuple(new_prefixes or ())
    report = FitReport(total=len(own))
    for key, value in own.items():
        theirs = state.get(key)
        if theirs is not None and tuple(theirs.shape) == tuple(value.shape):
            report.loaded.append(key)
        elif key.startswith(optional):
            report.new.append(key)
            if theirs is not None:
                report.unused.append(key)
        elif theirs is None:
            report.missing.append(key)
        else:
            report.mismatched.append((key, tuple(theirs.shape), tuple(value.shape)))
    for key in state:
        if key not in own:
            (report.unused if key.startswith(optional) else report.unexpected).append(key)
    return report


def mixer_prefixes(model: nn.Module) -> tuple[str, ...]:
    """``('backbone.layers.0.1.0.attn.', ...)``: the key prefix of every token mixer of
    ``model``, found by type, whatever the backbone's layout."""
    from ..mixers.base import TokenMixer
    return tuple(f'{name}.' for name, module in model.named_modules()
                 if isinstance(module, TokenMixer))


def compact(keys) -> str:
    """``layers.2.1.{0..17}.attn.w1, ...``: keys that differ only in their last index, folded."""
    groups = {}
    for key in keys:
        parts = key.split('.')
        index = max((i for i, part in enumerate(parts) if part.isdigit()), default=None)
        if index is None:
            groups.setdefault(key, [])
        else:
            pattern = '.'.join(parts[:index] + ['{}'] + parts[index + 1:])
            groups.setdefault(pattern, []).append(int(parts[index]))
    return ', '.join(pattern.replace('{}', f'{{{min(at)}..{max(at)}}}') if at else pattern
                     for pattern, at in groups.items())


def trained_with(meta: dict) -> str:
    """``' It was trained with NAME (mixers A, B).'`` from mmengine's meta, if it has the config
    (its text read with a regular expression, never executed: it came with the file)."""
    if not isinstance(meta, dict):
        return ''
    name, text = meta.get('experiment_name'), meta.get('cfg') or meta.get('config_text')
    name = _TIMESTAMP.sub('', name) if isinstance(name, str) else 'a config'
    mixers = []
    if isinstance(text, str):
        from ..mixers.catalogue import registered_mixers
        known = set(registered_mixers())
        mixers = [t for t in dict.fromkeys(re.findall(r"type\s*=\s*['\"](\w+)['\"]", text))
                  if t in known]
    if name == 'a config' and not mixers:
        return ''
    return (f' Its meta says it was trained with {name}'
            + (f' (mixers {", ".join(mixers)})' if mixers else '') + '.')


def _describe(report: FitReport, model: nn.Module, state: dict, source: str, meta: dict,
              advice: str) -> str:
    mixers = mixer_prefixes(model)
    groups = {}
    for key in report.missing:
        group = 'backbone mixers' if key.startswith(mixers) else key.split('.', 1)[0]
        groups.setdefault(group, []).append(key)
    problems = []
    for group, keys in groups.items():
        text = f'{group}: {len(keys)} missing (e.g. {keys[0]})'
        if group == 'backbone mixers':
            held = sorted({'attn.' + re.sub(r'[._](weight|bias)$', '', key[len(prefix):])
                           for key in state for prefix in mixers if key.startswith(prefix)})
            text += ('; the checkpoint holds mixer tensors ' + ', '.join(held[:6])
                     + (', ...' if len(held) > 6 else '') if held else
                     '; the checkpoint holds no mixer tensors')
            types = dict.fromkeys(type(model.get_submodule(p[:-1])).__name__ for p in mixers)
            text += f', the config builds {", ".join(types)}'
        problems.append(text)
    if report.mismatched:
        key, theirs, ours = report.mismatched[0]
        problems.append(f'{len(report.mismatched)} of other shape (e.g. {key}: checkpoint '
                        f'{theirs}, model {ours})')
    if report.unexpected:
        problems.append(f'{len(report.unexpected)} not in the model (e.g. {report.unexpected[0]})')
    found = len(report.loaded)
    what = 'holds no tensor of this model' if not found else 'does not fit this model'
    return (f'checkpoint {source} {what}: found {found} of the model\'s {report.total} '
            f'tensors; {"; ".join(problems) or "empty state dict"}.{trained_with(meta)} {advice}')


def check_fit(model: nn.Module, checkpoint, filename: str, new_prefixes=(),
              advice: str = TRAINED_ADVICE) -> FitReport:
    """Raise :class:`CheckpointMismatchError` unless ``checkpoint`` (a checkpoint dict or a state
    dict) holds every tensor of ``model`` outside ``new_prefixes`` with its shape, and no other."""
    state = state_dict_of(checkpoint)
    report = fit_report(model, state, new_prefixes)
    if not report.fits:
        meta = checkpoint.get('meta', {}) if isinstance(checkpoint, dict) else {}
        raise CheckpointMismatchError(_describe(report, model, state, filename, meta, advice))
    return report


def log_fit(report: FitReport, source: str) -> None:
    """The summary of a load: one line, then the new and unused tensors by name (folded)."""
    skipped = len(report.unexpected) + len(report.mismatched) + len(report.unused)
    lines = [f'{source}: loaded {len(report.loaded)} of the model\'s {report.total} tensors, '
             f'skipped {skipped} checkpoint tensors (not in the model or of another shape); '
             f'{report.total - len(report.loaded)} model tensors keep their initialisation']
    # A fine-tuning load (no prefixes given) lists its missing tensors too: a transplant's new
    # mixers must be seen by name, not as a count.
    mismatched = [key for key, _, _ in report.mismatched]
    kept = report.new + report.missing + mismatched
    if kept:
        lines.append(f'newly initialised tensors ({len(kept)}): {compact(kept)}')
    unused = report.unused + report.unexpected + mismatched
    if unused:
        lines.append(f'checkpoint tensors not used ({len(unused)}): {compact(unused)}')
    print_log('\n'.join(lines), logger='current', level=logging.INFO)


def load_state(model: nn.Module, checkpoint, source: str, new_prefixes=(),
               advice: str = TRAINED_ADVICE, log: bool = True) -> FitReport:
    """:func:`check_fit`, then load ``checkpoint`` (a checkpoint dict, or a pretrained state dict
    already remapped to the model's names) into ``model``; :func:`log_fit` when ``log``."""
    report = check_fit(model, checkpoint, source, new_prefixes, advice)
    state = state_dict_of(checkpoint)
    model.load_state_dict({k: state[k] for k in report.loaded}, strict=False)
    if log:
        log_fit(report, source)
    return report


def load_weights(model: nn.Module, checkpoint: str, new_prefixes=(), loaded=None) -> dict:
    """Read ``checkpoint`` as data (or take the already ``loaded`` dict), :func:`load_state` it
    strictly, without a log line, and return it (its ``meta``): evaluation, inference, export
    and analysis never run with randomly initialised weights."""
    if loaded is None:
        loaded = load_checkpoint_file(checkpoint, map_location='cpu')
    load_state(model, loaded, checkpoint, new_prefixes, log=False)
    return loaded


class CheckpointFitHook(Hook):
    """Checks every checkpoint the Runner loads (``load_from``, ``--resume``) against its model.

    Args:
        strict (bool): Refuse a checkpoint that does not fit (evaluation); otherwise log
            :func:`log_fit` (fine-tuning). Default: True.
        new_prefixes (Sequence[str]): Model key prefixes a checkpoint need not hold.
            Default: ().
    """
    priority = 'VERY_HIGH'

    def __init__(self, strict: bool = True, new_prefixes=()):
        self.strict = strict
        self.new_prefixes = tuple(new_prefixes or ())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        if isinstance(model, BaseTTAModel):
            model = model.module
        filename = runner._load_from or 'checkpoint'
        if self.strict:
            check_fit(model, checkpoint, filename, self.new_prefixes)
        else:
            log_fit(fit_report(model, state_dict_of(checkpoint)), filename)
