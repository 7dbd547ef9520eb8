"""Does a checkpoint fit the model? Refuse one that does not, instead of running random weights.

mmengine loads a state dict with ``strict=False`` and prints a "missing keys" warning: a wrong file
(another mixer's checkpoint, an empty state dict) then runs with randomly initialised weights and
produces confident-looking garbage. Evaluation, inference, export and analysis need every tensor
of the model, so :func:`check_fit` raises :class:`CheckpointMismatchError` (one message: found /
total counts, the missing groups, for the backbone mixers which mixer tensors the checkpoint holds
and which mixers the config builds, and the checkpoint's own training config where its meta has
it). A config may declare tensors a checkpoint is not expected to hold with
``checkpoint_new_keys = ['decode_head.conv_seg', ...]`` (key prefixes of the model).

Fine-tuning (``load_from``, pretrained ``init_cfg``) keeps partial loading; :func:`fit_summary`
is its one log line (tensors loaded / model tensors / skipped).

Cost: key and shape comparisons only, no tensor data is touched.
"""
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field

from mmengine.hooks import Hook
from mmengine.logging import print_log
from torch import Tensor, nn

from .checkpoint import load_checkpoint_file
from .errors import UserError

__all__ = ['CheckpointFitHook', 'CheckpointMismatchError', 'FitReport', 'check_fit',
           'fit_report', 'fit_summary', 'load_weights', 'state_dict_of']

#: A backbone mixer tensor: MixerMiT ``layers.{stage}.1.{j}.attn.*``, MixerViT
#: ``layers.{j}.attn.*``.
MIXER_KEY = re.compile(r'^(?:module\.)?backbone\.layers\.\d+\.(?:1\.\d+\.)?attn\.(.+)$')
_TIMESTAMP = re.compile(r'_\d{8}_\d{6}$')


class CheckpointMismatchError(UserError):
    """A checkpoint that does not hold the model's tensors."""


def state_dict_of(checkpoint) -> 'OrderedDict[str, Tensor]':
    """The state dict inside a checkpoint (``state_dict``/``model`` wrappers and DDP's
    ``module.`` prefix removed); non-tensor entries are left out."""
    state = checkpoint
    for wrapper in ('state_dict', 'model'):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict):
        return OrderedDict()
    return OrderedDict((k[len('module.'):] if k.startswith('module.') else k, v)
                       for k, v in state.items() if isinstance(v, Tensor))


@dataclass
class FitReport:
    """Keys of the model's state dict against a checkpoint's."""
    total: int
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    mismatched: list = field(default_factory=list)  # (key, checkpoint shape, model shape)
    declared_new: list = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return bool(self.loaded) and not (self.missing or self.unexpected or self.mismatched)


def fit_report(model: nn.Module, state: dict, new_prefixes=()) -> FitReport:
    """Compare ``model.state_dict()`` (names and shapes) with ``state``."""
    own = model.state_dict()
    new_prefixes = tuple(new_prefixes or ())
    report = FitReport(total=len(own))
    for key, value in own.items():
        if key not in state:
            (report.declared_new if key.startswith(new_prefixes) else report.missing).append(key)
        elif tuple(state[key].shape) != tuple(value.shape):
            if key.startswith(new_prefixes):
                report.declared_new.append(key)
            else:
                report.mismatched.append((key, tuple(state[key].shape), tuple(value.shape)))
        else:
            report.loaded.append(key)
    report.unexpected = [k for k in state if k not in own and not k.startswith(new_prefixes)]
    return report


def _group(key: str) -> str:
    return 'backbone mixers' if MIXER_KEY.match(key) else key.split('.', 1)[0]


def _mixer_tensor_names(keys) -> list[str]:
    """``attn.q, attn.kv, ...``: the distinct mixer tensor names (weight/bias folded)."""
    names = set()
    for key in keys:
        m = MIXER_KEY.match(key)
        if m:
            names.add('attn.' + re.sub(r'[._](weight|bias)$', '', m.group(1)))
    return sorted(names)


def _model_mixers(model: nn.Module) -> list[str]:
    from ..mixers.base import TokenMixer
    return list(dict.fromkeys(type(m).__name__ for m in model.modules()
                              if isinstance(m, TokenMixer)))


def trained_with(meta: dict) -> str:
    """``' It was trained with NAME (mixers A, B).'`` from mmengine's meta, if it has the config.

    The config text is read with a regular expression, never executed: it came with the file.
    """
    if not isinstance(meta, dict):
        return ''
    name, text = meta.get('experiment_name'), meta.get('cfg')
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


def _describe(report: FitReport, model: nn.Module, state: dict, filename: str,
              meta: dict) -> str:
    found = len(report.loaded)
    problems = []
    groups = OrderedDict()
    for key in report.missing:
        groups.setdefault(_group(key), []).append(key)
    for group, keys in groups.items():
        text = f'{group}: {len(keys)} missing (e.g. {keys[0]})'
        if group == 'backbone mixers':
            held = _mixer_tensor_names(state)
            text += ('; the checkpoint holds mixer tensors ' + ', '.join(held[:6])
                     + (', ...' if len(held) > 6 else '') if held else
                     '; the checkpoint holds no mixer tensors')
            text += f', the config builds {", ".join(_model_mixers(model)) or "no TokenMixer"}'
        problems.append(text)
    if report.mismatched:
        key, theirs, ours = report.mismatched[0]
        problems.append(f'{len(report.mismatched)} of other shape (e.g. {key}: checkpoint '
                        f'{theirs}, model {ours})')
    if report.unexpected:
        problems.append(f'{len(report.unexpected)} not in the model (e.g. {report.unexpected[0]})')
    what = 'holds no tensor of this model' if not found else 'does not fit this model'
    return (f'checkpoint {filename} {what}: found {found} of the model\'s {report.total} '
            f'tensors; {"; ".join(problems) or "empty state dict"}.{trained_with(meta)} '
            'Pass the checkpoint trained with this config (or the config it was trained with); '
            'a config may list tensors it expects to be new in checkpoint_new_keys.')


def check_fit(model: nn.Module, checkpoint, filename: str, new_prefixes=()) -> FitReport:
    """Raise :class:`CheckpointMismatchError` unless ``checkpoint`` holds every tensor of
    ``model`` (other than ``new_prefixes``) with its shape, and nothing else."""
    state = state_dict_of(checkpoint)
    report = fit_report(model, state, new_prefixes)
    if not report.fits:
        meta = checkpoint.get('meta', {}) if isinstance(checkpoint, dict) else {}
        raise CheckpointMismatchError(_describe(report, model, state, filename, meta))
    return report


def fit_summary(model: nn.Module, checkpoint, filename: str) -> FitReport:
    """Log one line for a partial load (fine-tuning): loaded / model tensors / skipped."""
    report = fit_report(model, state_dict_of(checkpoint))
    skipped = len(report.unexpected) + len(report.mismatched)
    print_log(f'{filename}: loaded {len(report.loaded)} of the model\'s {report.total} tensors, '
              f'skipped {skipped} checkpoint tensors (not in the model or of another shape); '
              f'{report.total - len(report.loaded)} model tensors keep their initialisation',
              logger='current', level=logging.INFO)
    return report


def load_weights(model: nn.Module, checkpoint: str, new_prefixes=(), loaded=None) -> dict:
    """Read ``checkpoint`` as data (:func:`~.checkpoint.load_checkpoint_file`; or take the
    already ``loaded`` dict), refuse it unless it fits ``model`` (:func:`check_fit`), load it.

    For evaluation, inference, export and analysis: they never run with randomly initialised
    weights. Returns the checkpoint dict (its ``meta``).
    """
    if loaded is None:
        loaded = load_checkpoint_file(checkpoint, map_location='cpu')
    report = check_fit(model, loaded, checkpoint, new_prefixes)
    state = state_dict_of(loaded)
    model.load_state_dict(OrderedDict((k, state[k]) for k in report.loaded), strict=False)
    return loaded


def _unwrap(model: nn.Module) -> nn.Module:
    from mmengine.model import BaseTTAModel, is_model_wrapper
    if is_model_wrapper(model):
        model = model.module
    if isinstance(model, BaseTTAModel):
        model = model.module
    return model


class CheckpointFitHook(Hook):
    """Checks every checkpoint the Runner loads (``load_from``, ``--resume``) against its model.

    Args:
        strict (bool): Refuse a checkpoint that does not fit (evaluation); otherwise log
            :func:`fit_summary` (fine-tuning). Default: True.
        new_prefixes (Sequence[str]): Model key prefixes a checkpoint need not hold.
            Default: ().
    """
    priority = 'VERY_HIGH'

    def __init__(self, strict: bool = True, new_prefixes=()):
        self.strict = strict
        self.new_prefixes = tuple(new_prefixes or ())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = _unwrap(runner.model)
        filename = runner._load_from or 'checkpoint'
        if self.strict:
            check_fit(model, checkpoint, filename, self.new_prefixes)
        else:
            fit_summary(model, checkpoint, filename)
