"""Bad input fails before the Runner, in one line naming the config key, the file and what to do,
where mmengine fails later and vaguer (an empty split: ``need at least one array to concatenate``;
an unwritable work_dir: at the first checkpoint; a misspelt ``type``: a registry ``KeyError``; a
missing pretrained file: deep in ``init_weights``)."""
import difflib
import importlib
import inspect
import logging
import os
import os.path as osp
import tempfile
from contextlib import suppress

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.utils import scandir

from .errors import UserError

__all__ = ['check_data_roots', 'check_model_types', 'check_pretrained', 'check_work_dir']

CITYSCAPES_HELP = """\
Expected the mmseg Cityscapes layout: {root}/leftImg8bit/{{train,val}}/<city>/*_leftImg8bit.png,
{root}/gtFine/{{train,val}}/<city>/*_gtFine_labelTrainIds.png. Get leftImg8bit_trainvaltest.zip
and gtFine_trainvaltest.zip from https://www.cityscapes-dataset.com, unzip both into {root}, run
`python tools/dataset/cityscapes.py {root}`, or pass --cfg-options
{{train,val,test}}_dataloader.dataset.data_root=/path/to/cityscapes, or `make demo` (made-up)."""
MIT_WEIGHTS_HELP = ('MiT ImageNet-1K weights (b3 shown, b0-b5 alike; NVIDIA\'s non-commercial '
                    'licence): `hf download nvidia/mit-b3 --local-dir data/pretrained/mit-b3`, '
                    'then `python tools/model_converters/mit2afno_seg.py data/pretrained/mit-b3 '
                    'data/pretrained/mit_b3.pth` (other sources: docs/configs.md).')
# Keys under ``model`` whose ``type`` is in another registry (initialisers, mmpretrain's augments)
OTHER_REGISTRY_KEYS = ('init_cfg', 'augments')


def _leaves(dataset) -> list:
    """The leaf configs of a possibly wrapped dataset config (Repeat/Concat/ClassBalanced)."""
    if dataset is None or 'datasets' in dataset:
        return [leaf for sub in (dataset or {}).get('datasets', ()) for leaf in _leaves(sub)]
    return _leaves(dataset['dataset']) if 'dataset' in dataset else [dataset]


def _image_suffix(dataset: dict, mmpretrain: bool):
    """What the dataset's images end in: its setting, else its class's default."""
    if mmpretrain:  # matched case-insensitively: ImageNet's files end in '.JPEG'
        return tuple(dataset.get('extensions') or ('.jpg', '.jpeg', '.png', '.bmp', '.tif'))
    from mmseg.registry import DATASETS
    default = '.jpg'  # mmseg's BaseSegDataset's
    with suppress(Exception):  # the class's own default
        kind = dataset.get('type')
        cls = DATASETS.get(kind) if isinstance(kind, str) else kind
        default = inspect.signature(cls.__init__).parameters['img_suffix'].default
    return dataset.get('img_suffix') or default


def check_data_roots(cfg: Config, loaders=('train_dataloader', 'val_dataloader',
                                            'test_dataloader')) -> None:
    """A :class:`.UserError` if a dataset folder of ``loaders`` is missing or a split is empty."""
    mmpretrain = cfg.get('default_scope', None) == 'mmpretrain'
    for loader in loaders:
        for dataset in _leaves((cfg.get(loader) or {}).get('dataset')):
            where = f'{cfg.filename or "the config"}: {loader}.dataset'
            root = dataset.get('data_root', '') or ''
            prefix = dataset.get('data_prefix') or ''  # mmseg's dict, mmpretrain's string
            prefix = (prefix.get('img_path', '') if isinstance(prefix, dict) else prefix) or ''
            folder = osp.join(root, prefix or dataset.get('split') or '')  # ImageNet: split
            if not osp.isdir(folder):
                what = 'data_root' if not osp.isdir(root or '.') else 'data_prefix'
                message = (f'{where}.{what} points to {folder!r}, which does not exist '
                           f'(working directory: {osp.abspath(".")}).')
                if 'Cityscapes' in str(dataset.get('type', '')):
                    help_root = root.rstrip('/') or 'data/cityscapes'
                    message += '\n' + CITYSCAPES_HELP.format(root=help_root)
                raise UserError(message)
            ann_file = osp.join(root, dataset.get('ann_file') or '')  # an absolute one as it is
            if dataset.get('ann_file') and osp.isfile(ann_file):
                with open(ann_file) as file:
                    if not any(line.strip() for line in file):
                        raise UserError(f'{where}.ann_file {ann_file} lists no sample (the '
                                        'file is empty); the split would have no data.')
                continue
            suffix = _image_suffix(dataset, mmpretrain)
            if next(scandir(folder, suffix, True, case_sensitive=not mmpretrain), None) is None:
                raise UserError(
                    f'{where} has no samples: no file ending in {suffix!r} under {folder} '
                    '(searched recursively). Check data_root, data_prefix.img_path and '
                    'img_suffix, or regenerate the data.')


def check_work_dir(work_dir: str) -> None:
    """Create ``work_dir`` if needed and a (nameless, self-deleting) file in it."""
    try:
        os.makedirs(work_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=work_dir).close()
    except OSError as error:
        raise UserError(f'work_dir {osp.abspath(work_dir)} is not writable ({error}): logs and '
                        'checkpoints go there; pass --work-dir with a folder you can write to.'
                        ) from error


def _walk(node, path: str, skip=()):
    """(path, parent, key, value) of each item under ``node``, depth first, not under ``skip``."""
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, (list, tuple)) else ()
    for key, value in items:
        where = f'{path}.{key}' if isinstance(node, dict) else f'{path}[{key}]'
        yield where, node, key, value
        if key not in skip:
            yield from _walk(value, where, skip)


def check_model_types(cfg: Config) -> None:
    """A :class:`.UserError` for an unregistered ``type`` in ``cfg.model``, looked up in the
    ``MODELS`` of the config's ``default_scope`` (mmseg if unset)."""
    source, scope = cfg.filename or 'the config', cfg.get('default_scope', None) or 'mmseg'
    registry = importlib.import_module(f'{scope}.registry').MODELS
    for path, _, key, name in _walk(cfg.get('model'), 'model', OTHER_REGISTRY_KEYS):
        if key != 'type' or not isinstance(name, str):
            continue
        with suppress(Exception):  # a name whose module fails to import: not registered
            if registry.get(name) is not None:
                continue
        names = [n for r in (registry, registry.parent) if r for n in r.module_dict]
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        raise UserError(
            f'{source}: {path}={name!r} is not a registered model component (scope '
            f'{registry.scope!r}).' + (f' Did you mean: {", ".join(close)}?' if close else '')
            + " Check the spelling, and that the config has custom_imports = dict(imports="
            "['afno_seg'], allow_failed_imports=False) for afno_seg's modules.")


def check_pretrained(cfg: Config, from_scratch: bool = False) -> None:
    """Refuse a missing local pretrained file of ``cfg.model`` (``init_cfg`` of type
    ``Pretrained``, mmseg's ``pretrained=``): a :class:`.UserError`. ``from_scratch``,
    or a ``load_from`` that replaces every weight anyway, drops them instead (one line)."""
    found = []
    for where, node, name, value in _walk(cfg.get('model'), 'model'):
        if isinstance(value, dict) and value.get('type') == 'Pretrained' and \
                isinstance(value.get('checkpoint'), str):
            found.append((f'{where}.checkpoint', value['checkpoint'], node, name))
        elif name == 'pretrained' and isinstance(value, str):
            found.append((where, value, node, name))
    load_from = cfg.get('load_from') if not from_scratch else None
    if from_scratch or (load_from and found):
        for _, _, node, name in reversed(found):  # a list's later items first
            if isinstance(node, dict):
                node[name] = None
            else:
                del node[name]
        dropped = ', '.join(f'{key}={path}' for key, path, *_ in found) or 'nothing to drop'
        start = 'its own initialisation' if from_scratch else 'load_from'
        print_log(f'{"--from-scratch" if from_scratch else f"load_from={load_from}"}: no '
                  f'pretrained weights ({dropped}); the model starts from {start}',
                  logger='current', level=logging.INFO)
    for key, path, *_ in [] if from_scratch or load_from else found:
        # a folder: a transformers download (backbones/mit_checkpoint.py reads it)
        if '://' not in path and not osp.exists(osp.expanduser(path)):
            mit_help = MIT_WEIGHTS_HELP + ' ' if osp.basename(path).startswith('mit_') else ''
            raise UserError(
                f'{cfg.filename or "the config"}: {key}={path!r} does not exist (working '
                f'directory: {osp.abspath(".")}). {mit_help}Put the file there, or pass '
                '--from-scratch to train from the model\'s own initialisation.')
