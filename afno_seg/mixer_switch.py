"""``--mixer SPEC``: any SegFormer config of mmseg's model zoo (or ours) with the chosen mixers.

The tools' one switch turns a config whose backbone is mmseg's ``MixVisionTransformer`` (or our
``MixerMiT``) into :class:`~afno_seg.backbones.MixerMiT` with the mixers of ``SPEC``
(:func:`parse_mixer_spec`). The backbone's size keys, ``drop_path_rate``, ``out_indices`` and the
decode head are kept; ``base_img_size`` becomes the config's crop (the grid GFN/FNO store their
filters at); ``custom_imports`` gains ``afno_seg``, so that the derived config, as the Runner
writes it into the work_dir, builds without the switch. Nothing is downloaded: MiT weights are
looked for in ``data/pretrained/`` (:func:`use_local_pretrained`). Configs are given by path or as
``mmseg::segformer/...py`` (:func:`resolve_config_path`; mmengine 0.10.7 resolves ``pkg::`` only
inside ``_base_``). Config-level only: no model is built here.
"""
import ast
import importlib.util
import inspect
import logging
import os.path as osp
import re
from pathlib import Path

from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log

from .engine.errors import UserError

__all__ = ['SUPPORTED_BACKBONES', 'PRETRAINED_DIR', 'parse_mixer_spec', 'resolve_config_path',
           'mit_size', 'crop_size', 'switch_mixer', 'use_local_pretrained', 'spec_slug']

#: Backbone types ``--mixer`` converts (both have mmseg's MiT parameter names).
SUPPORTED_BACKBONES = ('MixVisionTransformer', 'MixerMiT')
#: Where MiT ImageNet weights are looked for (relative to the working directory).
PRETRAINED_DIR = 'data/pretrained'
_SLUG_RE = re.compile(r'[^A-Za-z0-9.=+-]+')


def parse_mixer_spec(spec: str, variants: dict[str, dict] | None = None,
                     num_stages: int = 4) -> list[dict]:
    """The per-stage mixer dicts of a spec such as ``gfn``, ``afno+afno+esa+esa`` or
    ``afno:sparsity_threshold=0.1``.

    Args:
        spec (str): Catalogue names joined by ``+`` (one, or one per stage), then optional
            ``:key=value`` settings for every stage whose mixer takes them.
        variants (dict[str, dict], optional): Catalogue, short name -> mixer config dict.
            Default: None (:func:`afno_seg.mixers.mixer_variants`, unlisted variants included).
        num_stages (int): Backbone stages. Default: 4.

    Returns:
        list[dict]: ``num_stages`` mixer config dicts.

    Raises:
        UserError: an unknown name (the message lists the listed catalogue names), a wrong
            number of stages, a setting that is not ``key=value``, that no mixer of the spec
            takes (the message lists what each takes) or of another kind than its default.
    """
    if variants is None:
        from .mixers import mixer_variants
        variants, listed = mixer_variants(include_unlisted=True), mixer_variants()
    else:
        listed = variants
    names, *settings = str(spec).split(':')
    stage_names = names.split('+')
    unknown = [name for name in stage_names if name not in variants]
    if unknown:
        raise UserError(f'--mixer {spec}: unknown mixer {unknown[0]!r}; the catalogue has '
                        f'{", ".join(sorted(listed))}')
    if len(stage_names) not in (1, num_stages):
        raise UserError(f'--mixer {spec}: give one mixer or {num_stages} joined by "+", got '
                        f'{len(stage_names)}')
    extra = {}
    for setting in settings:
        key, sep, value = setting.partition('=')
        if not sep or not key:
            raise UserError(f'--mixer {spec}: settings after ":" are key=value, got {setting!r}')
        try:  # a Python literal when it is one (numbers, tuples), else a str
            extra[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            extra[key] = value
    taken = {name: _settings(variants[name]) for name in dict.fromkeys(stage_names)}
    for key, value in extra.items():
        _check_setting(spec, key, value, taken)
    stage_names = stage_names * (num_stages // len(stage_names))
    # A setting goes to every stage whose mixer takes it (afno+afno+esa+esa:sparsity_threshold=..)
    return [dict(variants[name], **{key: value for key, value in extra.items()
                                    if taken[name] is None or key in taken[name][1]})
            for name in stage_names]


def _settings(variant: dict) -> tuple[str, dict] | None:
    """(class name, setting -> default) of a catalogue variant's mixer class; None when the type
    is not registered (a test's own variant table: the build will say)."""
    from .registry import MMSEG_MODELS
    cls = MMSEG_MODELS.get(variant.get('type')) if isinstance(variant.get('type'), str) else None
    if cls is None:
        return None
    return cls.__name__, {key: param.default
                          for key, param in inspect.signature(cls).parameters.items()
                          if key not in ('embed_dims', 'init_cfg') and param.kind in (
                              param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)}


def _check_setting(spec: str, key: str, value, taken: dict) -> None:
    """A setting some stage's mixer takes, of its default's kind: a typo is one line listing
    what the mixers take, not a TypeError from deep inside the model build."""
    if None in taken.values():
        return
    takers = [name for name, (_, settings) in taken.items() if key in settings]
    if not takers:
        raise UserError(f'--mixer {spec}: no mixer here has a setting {key!r}; ' + '; '.join(
            f'{name} ({cls}) takes ' + (', '.join(
                k if d is inspect.Parameter.empty else f'{k}={d!r}' for k, d in settings.items())
                or 'none') for name, (cls, settings) in taken.items()))
    for name in takers:
        cls, settings = taken[name]
        if not _same_kind(value, settings[key]):
            raise UserError(f'--mixer {spec}: {key} takes values like its default '
                            f'{settings[key]!r} ({type(settings[key]).__name__}), got {value!r} '
                            f'({name}: {cls})')


def _same_kind(value, default) -> bool:
    """``value`` can stand where ``default`` does (an int for a float, a list for a tuple)."""
    if default is None or default is inspect.Parameter.empty:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (tuple, list)):
        return isinstance(value, (tuple, list))
    return isinstance(value, type(default))


def spec_slug(spec: str) -> str:
    """A file-name form of a spec (``afno:sparsity_threshold=0.1`` ->
    ``afno_sparsity_threshold=0.1``)."""
    return _SLUG_RE.sub('_', spec)  # ':' is outside the kept set too


def resolve_config_path(config: str) -> str:
    """``mmseg::segformer/x.py`` -> the file inside the installed package
    (``<site-packages>/mmseg/.mim/configs/segformer/x.py``); other paths unchanged.

    Raises:
        UserError: the package is not installed or has no such config file.
    """
    config = str(config)
    package, sep, relative = config.partition('::')
    if not sep or '/' in package or not package:
        return config
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f'{config}: package {package!r} is not installed')
    root = Path(list(spec.submodule_search_locations)[0]) / '.mim' / 'configs'
    path = root / relative
    if not path.is_file():
        folder = path.parent if path.parent.is_dir() else root
        near = sorted(p.name for p in folder.glob('*.py'))[:8]
        raise UserError(f'{config}: no such config in the installed {package} ({path}); '
                        f'{folder} has e.g. {", ".join(near) or "no configs"}')
    return str(path)


def mit_size(backbone: dict) -> str | None:
    """``'b0'`` .. ``'b5'`` when the backbone's sizes are those of a SegFormer MiT, else None."""
    from .backbones.mixer_mit import ARCH_SETTINGS
    if backbone.get('arch') in ARCH_SETTINGS:
        return backbone['arch']
    given = {key: list(value) if isinstance(value, (list, tuple)) else value
             for key in ('embed_dims', 'num_layers', 'num_heads')
             if (value := backbone.get(key)) is not None}
    return next((name for name, sizes in ARCH_SETTINGS.items() if sizes == given), None)


def crop_size(cfg: Config) -> tuple[int, int] | None:
    """The training input size ``(H, W)``: the data preprocessor's ``size`` (what the network
    sees: crops are padded to it), else the train pipeline's ``RandomCrop``, else ``crop_size``."""
    size = ((cfg.get('model') or {}).get('data_preprocessor') or {}).get('size')
    if size is None:
        pipeline = (((cfg.get('train_dataloader') or {}).get('dataset') or {}).get('pipeline')
                    or [])
        size = next((step.get('crop_size') for step in pipeline
                     if isinstance(step, dict) and step.get('type') == 'RandomCrop'), None)
    size = size if size is not None else cfg.get('crop_size')
    if size is None:
        return None
    size = (size, size) if isinstance(size, int) else tuple(size)
    return int(size[0]), int(size[1])


def _is_url(path) -> bool:
    return isinstance(path, str) and '://' in path


def use_local_pretrained(backbone: dict, pretrained_dir: str = PRETRAINED_DIR) -> str | None:
    """Point ``backbone.init_cfg`` at local MiT weights; nothing is downloaded.

    A local checkpoint the config already names is kept when it exists. Otherwise
    ``pretrained_dir/mit_<size>.pth`` (the SegFormer authors' file) or the file name of the
    config's URL there (mmseg's conversion, e.g. ``mit_b0_20220624-7e0fe6dd.pth``), the first
    that exists, else the first of these names: the training preflight refuses a missing file
    unless ``--from-scratch``. A backbone that names no weights (the demo config) keeps its
    own initialisation: ``--mixer`` asks for weights only where the config does.

    Returns:
        str | None: The checkpoint path named, or None (the config names no weights).
    """
    init_cfg = backbone.get('init_cfg') or {}
    named = init_cfg.get('checkpoint') if isinstance(init_cfg, dict) else None
    named = named or backbone.get('pretrained')
    backbone['pretrained'] = None
    if not named:
        # The config starts from its own initialisation (the demo config): so does its --mixer
        # form; weights are looked for only where the config asked for some.
        return None
    size = mit_size(backbone)
    candidates = [] if _is_url(named) else [named]
    if size is not None:
        candidates.append(osp.join(pretrained_dir, f'mit_{size}.pth'))
    if _is_url(named):
        candidates.append(osp.join(pretrained_dir, osp.basename(named)))
    found = next((path for path in candidates if osp.isfile(path)), candidates[0])
    backbone['init_cfg'] = dict(type='Pretrained', checkpoint=found)
    if osp.isfile(found):
        print_log(f'--mixer: MiT{"-" + size.upper() if size else ""} ImageNet weights from '
                  f'{found} (mixer tensors that MiT lacks start freshly initialised)',
                  logger='current', level=logging.INFO)
    return found


def switch_mixer(cfg: Config, spec: str | None, pretrained: bool = True,
                 pretrained_dir: str = PRETRAINED_DIR, default_work_dir: bool = False) -> Config:
    """Turn ``cfg``'s MiT backbone into MixerMiT with the mixers of ``spec`` (in place).

    Args:
        cfg (Config): A loaded config (``--cfg-options`` already merged, so that a changed crop
            sets ``base_img_size``) whose ``model.backbone`` is one of :data:`SUPPORTED_BACKBONES`.
        spec (str | None): The ``--mixer`` spec; None returns ``cfg`` unchanged.
        pretrained (bool): Name local MiT weights (:func:`use_local_pretrained`), for training;
            False drops ``init_cfg`` (a checkpoint or random weights follow). Default: True.
        pretrained_dir (str): Folder of ``mit_b*.pth``. Default: ``data/pretrained``.
        default_work_dir (bool): ``cfg.work_dir`` is the tools' default
            (``work_dirs/<config stem>``): append ``_<spec>``, so that runs of one config with
            different mixers do not share (and resume from) one folder. Default: False.

    Returns:
        Config: ``cfg``.

    Raises:
        UserError: another backbone type, an unknown mixer name, a bad spec, or a backbone key
            MixerMiT does not take.
    """
    if spec is None:
        return cfg
    from .backbones.mixer_mit import MixerMiT
    source = cfg.filename or 'the config'
    backbone = ((cfg.get('model') or {}).get('backbone'))
    backbone_type = backbone.get('type') if isinstance(backbone, dict) else None
    if str(backbone_type).split('.')[-1] not in SUPPORTED_BACKBONES:
        raise UserError(f'--mixer: {source} has backbone {backbone_type!r}; the switch supports '
                        f'{" and ".join(SUPPORTED_BACKBONES)} (SegFormer MiT backbones) only')
    mixers = parse_mixer_spec(spec, num_stages=backbone.get('num_stages', 4))
    accepted = inspect.signature(MixerMiT).parameters
    foreign = sorted(key for key in backbone if key != 'type' and key not in accepted)
    if foreign:
        raise UserError(f'--mixer: {source}: model.backbone sets {", ".join(foreign)}, which '
                        'MixerMiT does not take')
    backbone['type'] = 'MixerMiT'
    backbone['mixers'] = mixers
    crop = crop_size(cfg)
    if crop is not None:
        backbone['base_img_size'] = crop[0] if crop[0] == crop[1] else list(crop)
    if cfg.get('model', {}).get('pretrained'):
        backbone.setdefault('pretrained', cfg.model.pretrained)
        cfg.model.pretrained = None
    if pretrained:
        use_local_pretrained(backbone, pretrained_dir)
    else:
        backbone['init_cfg'], backbone['pretrained'] = None, None
    imports = cfg.get('custom_imports') or ConfigDict(imports=[], allow_failed_imports=False)
    listed = imports.get('imports') or []
    listed = [listed] if isinstance(listed, str) else list(listed)
    if 'afno_seg' not in listed:
        imports['imports'] = listed + ['afno_seg']
    cfg.custom_imports = imports
    if default_work_dir and cfg.get('work_dir'):
        cfg.work_dir = f'{str(cfg.work_dir).rstrip("/")}_{spec_slug(spec)}'
    return cfg
