"""Checks run by the tools before a Runner is built, so bad input fails at once, in one line
naming the config key, the file and what to do, not after the Runner's hundreds of log lines.

mmengine alone fails on these with messages that name neither split nor folder (an empty split:
``ValueError: need at least one array to concatenate``), with a bare ``PermissionError`` traceback
inside ``Runner.__init__`` (an unwritable work_dir; or, writable for folders only, at the first
checkpoint, hours later), or with a registry ``KeyError`` (a misspelt ``type``). The checkpoints a
run will load are checked as data (:mod:`.checkpoint`), and a missing pretrained file is refused
unless ``tools/train.py --from-scratch`` drops them. Free space is checked once the model exists
(:class:`~.checkpoint_hook.AtomicCheckpointHook`).
"""
import difflib
import importlib
import inspect
import logging
import os
import os.path as osp
from contextlib import suppress

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.runner import find_latest_checkpoint
from mmengine.utils import scandir

from .checkpoint import check_checkpoint_file as check_checkpoint
from .errors import UserError

__all__ = ['check_before_runner', 'check_checkpoint', 'check_config_checkpoints',
           'check_data_roots', 'check_model_types', 'check_work_dir',
           'config_checkpoints', 'pretrained_checkpoints', 'DataRootError', 'EmptySplitError',
           'PretrainedMissingError', 'UnknownTypeError', 'WorkDirError']

CITYSCAPES_HELP = """\
Expected the mmseg Cityscapes layout:
  {root}/leftImg8bit/{{train,val}}/<city>/*_leftImg8bit.png
  {root}/gtFine/{{train,val}}/<city>/*_gtFine_labelTrainIds.png
Get the data: register at https://www.cityscapes-dataset.com, download leftImg8bit_trainvaltest.zip
and gtFine_trainvaltest.zip, unzip both into {root}, then make the train-id labels with
  python tools/dataset/cityscapes.py {root}
or point the config elsewhere: --cfg-options train_dataloader.dataset.data_root=/path/to/cityscapes
(and the same for val_dataloader/test_dataloader).
No Cityscapes? `make demo` trains and evaluates on generated street scenes instead."""
MIT_WEIGHTS_HELP = ('MiT ImageNet-1K weights (B3 shown; b0 .. b5 alike): `hf download '
                    'nvidia/mit-b3 --local-dir data/pretrained/mit-b3` (Hugging Face Hub), then '
                    '`python tools/model_converters/mit2afno_seg.py data/pretrained/mit-b3 '
                    'data/pretrained/mit_b3.pth`; or OpenMMLab\'s file named in mmseg\'s SegFormer '
                    'configs (https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segformer/'
                    'mit_b3_20220624-13b1141c.pth) saved as data/pretrained/mit_b3.pth '
                    '(docs/configs.md). The weights carry NVIDIA\'s licence (non-commercial); '
                    'nothing is downloaded at run time.')


class DataRootError(UserError, FileNotFoundError):
    """A dataset folder named by the config does not exist."""


class UnknownTypeError(UserError, KeyError):
    """A ``type=`` in the model config that no registry knows."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class WorkDirError(UserError):
    """The work_dir cannot be created or written."""


class EmptySplitError(UserError):
    """A dataset split named by the config holds no sample."""


class PretrainedMissingError(UserError, FileNotFoundError):
    """A pretrained file named by the config does not exist."""


def leaf_datasets(dataset_cfg):
    """Yield the leaf dataset configs of possibly wrapped ones (Repeat/Concat/ClassBalanced)."""
    if dataset_cfg is None:
        return
    if 'datasets' in dataset_cfg:
        for sub in dataset_cfg['datasets']:
            yield from leaf_datasets(sub)
    elif 'dataset' in dataset_cfg:
        yield from leaf_datasets(dataset_cfg['dataset'])
    else:
        yield dataset_cfg


def loader_datasets(cfg: Config, loaders):
    """Yield ``(loader name, leaf dataset config)`` for the loaders the config has."""
    for loader in loaders:
        for dataset in leaf_datasets((cfg.get(loader) or {}).get('dataset')):
            yield loader, dataset


def image_folder(dataset) -> str:
    """``data_root`` joined with the image prefix: mmseg's ``data_prefix.img_path``, or
    mmpretrain's ``data_prefix`` string, or (ImageNet) the ``split`` name."""
    prefix = dataset.get('data_prefix') or ''
    if isinstance(prefix, dict):
        prefix = prefix.get('img_path', '') or ''
    return osp.join(dataset.get('data_root', '') or '', prefix or dataset.get('split') or '')


def _default_argument(dataset_type, name: str, fallback):
    """The default of ``name`` in the registered dataset class's ``__init__``."""
    from mmseg.registry import DATASETS
    with suppress(Exception):
        cls = DATASETS.get(dataset_type) if isinstance(dataset_type, str) else dataset_type
        default = inspect.signature(cls.__init__).parameters[name].default
        if default is not inspect.Parameter.empty:
            return default
    return fallback


# mmpretrain's CustomDataset/ImageNet image extensions (matched case-insensitively: ImageNet's
# files end in '.JPEG').
MMPRETRAIN_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif')


def check_data_roots(cfg: Config, loaders=('train_dataloader', 'val_dataloader',
                                            'test_dataloader')) -> None:
    """Raise :class:`DataRootError` if a dataset folder of the given loaders is missing,
    :class:`EmptySplitError` if a split has no sample."""
    source = cfg.filename or 'the config'
    for loader, dataset in loader_datasets(cfg, loaders):
        root = dataset.get('data_root', '') or ''
        folder = image_folder(dataset)
        if not osp.isdir(folder):
            what = 'data_root' if not osp.isdir(root or '.') else 'data_prefix'
            message = (f'{source}: {loader}.dataset.{what} points to {folder!r}, which does not '
                       f'exist (working directory: {osp.abspath(".")}).')
            if 'Cityscapes' in str(dataset.get('type', '')):
                message += '\n' + CITYSCAPES_HELP.format(root=root.rstrip('/') or 'data/cityscapes')
            raise DataRootError(message)
        if dataset.get('ann_file'):
            path = osp.join(root, dataset['ann_file'])  # an absolute ann_file as it is
            if osp.isfile(path):
                with open(path) as file:
                    if not any(line.strip() for line in file):
                        raise EmptySplitError(
                            f'{source}: {loader}.dataset.ann_file {path} lists no sample '
                            '(the file is empty); the split would have no data.')
                continue
        pretrain = cfg.get('default_scope', None) == 'mmpretrain'
        suffix = (tuple(dataset.get('extensions') or MMPRETRAIN_EXTENSIONS) if pretrain else
                  dataset.get('img_suffix') or _default_argument(dataset.get('type'),
                                                                 'img_suffix', '.jpg'))
        if next(scandir(folder, suffix, recursive=True, case_sensitive=not pretrain), None) is None:
            raise EmptySplitError(
                f'{source}: {loader}.dataset has no samples: no file ending in {suffix!r} '
                f'under {folder} (searched recursively). Check data_root, '
                'data_prefix.img_path and img_suffix, or regenerate the data (for Cityscapes: '
                'leftImg8bit/<split>/<city>/*_leftImg8bit.png).')


def check_work_dir(work_dir: str) -> None:
    """Create ``work_dir`` if needed and write (then delete) a probe file in it."""
    probe = osp.join(work_dir, f'.write-probe.{os.getpid()}')
    try:
        os.makedirs(work_dir, exist_ok=True)
        with open(probe, 'wb') as file:
            file.write(b'afno_seg')
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        where = ('' if error.filename in (None, work_dir, probe) else
                 f' (at {error.filename})')
        raise WorkDirError(
            f'work_dir {osp.abspath(work_dir)} is not writable: {error.strerror or error} '
            f'[errno {error.errno}]{where}. Logs and checkpoints go there; pass --work-dir with '
            'a folder you can write to.') from error
    finally:
        with suppress(OSError):
            os.remove(probe)


def _registered(registry, name: str) -> bool:
    try:
        return registry.get(name) is not None
    except Exception:  # a name that imports a missing module
        return False


def _all_names(registry) -> list[str]:
    names, node = set(), registry
    while node is not None:
        names.update(node.module_dict)
        node = node.parent
    for child in registry.children.values():
        names.update(child.module_dict)
    return sorted(names)


# Config keys under ``model`` whose ``type`` lives in another registry: weight initialisers
# (WEIGHT_INITIALIZERS), mmpretrain's batch augmentations (``train_cfg.augments``: Mixup, CutMix).
OTHER_REGISTRY_KEYS = ('init_cfg', 'augments')


def models_registry_of(cfg: Config):
    """The ``MODELS`` registry of the library the config's ``default_scope`` names (mmseg if
    unset): mmseg's and mmpretrain's are siblings, each unaware of the other's types."""
    scope = cfg.get('default_scope', None) or 'mmseg'
    try:
        return importlib.import_module(f'{scope}.registry').MODELS
    except (ImportError, AttributeError) as error:
        raise UserError(f'{cfg.filename or "the config"}: default_scope={scope!r} names no '
                        f'installed OpenMMLab library with a MODELS registry ({error})') from error


def check_model_types(cfg: Config, registry=None) -> None:
    """Raise :class:`UnknownTypeError` for an unregistered ``type`` in ``cfg.model``, looked up
    in ``registry`` or else in the ``MODELS`` of the config's ``default_scope``."""
    if registry is None:
        registry = models_registry_of(cfg)
    source = cfg.filename or 'the config'

    def visit(node, path):
        if isinstance(node, dict):
            name = node.get('type')
            if isinstance(name, str) and not _registered(registry, name):
                close = difflib.get_close_matches(name, _all_names(registry), n=5, cutoff=0.5)
                hint = f' Did you mean: {", ".join(close)}?' if close else ''
                raise UnknownTypeError(
                    f'{source}: {path}.type={name!r} is not a registered model component '
                    f'(scope {registry.scope!r}).{hint} '
                    "Check the spelling, and that the config has custom_imports = "
                    "dict(imports=['afno_seg'], allow_failed_imports=False) for afno_seg's "
                    'modules.')
            for key, value in node.items():
                if key not in OTHER_REGISTRY_KEYS:
                    visit(value, f'{path}.{key}')
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                visit(value, f'{path}[{index}]')

    if 'model' in cfg:
        visit(cfg.model, 'model')


def check_before_runner(cfg: Config, loaders) -> None:
    """What :func:`~.runner.build_runner` checks first: the data of ``loaders``
    (:func:`check_data_roots`), the work_dir, every model ``type``."""
    check_data_roots(cfg, loaders)
    check_work_dir(cfg.work_dir)
    check_model_types(cfg)


def _is_pretrained(node) -> bool:
    return isinstance(node, dict) and node.get('type') == 'Pretrained' and \
        isinstance(node.get('checkpoint'), str)


def pretrained_checkpoints(node, key: str = 'model', drop: bool = False) -> list[tuple[str, str]]:
    """``(config key, file)`` of every pretrained file under ``node`` (``init_cfg`` dicts of type
    ``Pretrained``, mmseg's ``pretrained='...'``); with ``drop``, removed from ``node``."""
    found = []
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, (list, tuple)) else ()
    for name, value in list(items):
        where = f'{key}.{name}' if isinstance(node, dict) else f'{key}[{name}]'
        if _is_pretrained(value):
            found.append((f'{where}.checkpoint', value['checkpoint']))
        elif name == 'pretrained' and isinstance(value, str):
            found.append((where, value))
        else:
            found += pretrained_checkpoints(value, where, drop)
            continue
        if drop and isinstance(node, dict):
            node[name] = None
    if drop and isinstance(node, list):
        node[:] = [value for value in node if not _is_pretrained(value)]
    return found


def config_checkpoints(cfg: Config, resume: bool = False) -> list[str]:
    """The checkpoint files a Runner built from ``cfg`` will read: ``load_from``, the one
    ``--resume`` continues from (``work_dir/last_checkpoint``), and every pretrained file in
    ``cfg.model`` (:func:`pretrained_checkpoints`); URLs too (read as data once fetched)."""
    load_from = cfg.get('load_from')
    if resume and not load_from:
        load_from = find_latest_checkpoint(cfg.work_dir)  # None (logged) if there is none
    files = [load_from] + [path for _, path in pretrained_checkpoints(cfg.get('model'))]
    return [f for f in dict.fromkeys(files) if f]


def check_config_checkpoints(cfg: Config, resume: bool = False, from_scratch: bool = False,
                             trust: bool = False) -> None:
    """Before a training Runner exists: the pretrained rule (``from_scratch``: drop the
    pretrained files, one line; else refuse a missing local one, :class:`PretrainedMissingError`),
    then :func:`check_checkpoint` for each of :func:`config_checkpoints` that exists (a URL: once
    downloaded where mmengine keeps it), unless ``trust`` (``--trust-checkpoint``)."""
    source = cfg.filename or 'the config'
    # load_from replaces every weight the pretrained files would give (a transplant keeps only
    # the new mixers' own initialisation), so they are not needed then
    whole_model = bool(cfg.get('load_from')) and not from_scratch
    pretrained = pretrained_checkpoints(cfg.get('model'), drop=from_scratch or whole_model)
    if from_scratch or (whole_model and pretrained):
        why = '--from-scratch' if from_scratch else f'load_from={cfg.load_from}'
        dropped = ', '.join(f'{key}={path}' for key, path in pretrained) or 'nothing to drop'
        print_log(f'{why}: no pretrained weights ({dropped}); the model starts from '
                  f'{"its own initialisation" if from_scratch else "load_from"}',
                  logger='current', level=logging.INFO)
    for key, path in [] if from_scratch or whole_model else pretrained:
        # a folder: a transformers download (backbones/mit_checkpoint.py reads it)
        if '://' not in path and not osp.exists(osp.expanduser(path)):
            where = MIT_WEIGHTS_HELP + ' ' if osp.basename(path).startswith('mit_') else ''
            raise PretrainedMissingError(
                f'{source}: {key}={path!r} does not exist (working directory: '
                f'{osp.abspath(".")}). {where}Put the file there, or pass --from-scratch to '
                'train from the model\'s own initialisation.')
    for filename in [] if trust else config_checkpoints(cfg, resume):
        if '://' in filename or osp.isfile(osp.expanduser(filename)):
            check_checkpoint(filename)
