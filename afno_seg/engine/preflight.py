"""Bad input fails before the Runner, in one line naming the config key, the file and what to do,
where mmengine fails later and vaguer: an empty split, an unwritable or used work_dir, a misspelt
``type``, loop or ``--cfg-options`` key, a missing pretrained file, random bytes as a checkpoint."""
import difflib
import importlib
import inspect
import logging
import os
import os.path as osp
import pickletools
import re
import shutil
import tempfile
import time
import zipfile
from contextlib import suppress
from pathlib import Path

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.utils import scandir

from .checkpoint import CheckpointError, local_checkpoint_file
from .errors import UserError

__all__ = ['check_checkpoint', 'check_data_roots', 'check_loaders', 'check_loop_keys',
           'check_model_types', 'check_option_keys', 'check_pretrained', 'check_work_dir',
           'claim_work_dir', 'finished_run']

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
CHECKPOINT_RE = re.compile(r'(iter|epoch)_(\d+)\.pth')
RUN_FOLDER_RE = re.compile(r'\d{8}_\d{6}')  # mmengine's <timestamp>/ of logs and vis_data


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
    """A :class:`.UserError` for a ``type`` in ``cfg.model`` not in its scope's (mmseg) MODELS."""
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
    """Refuse a missing local pretrained file of ``cfg.model`` (``init_cfg`` or ``pretrained=``): a
    :class:`.UserError`; ``from_scratch`` or a ``load_from`` drops them instead (one line)."""
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


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions, substitutions."""
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        row, last = [i], row
        for j, other in enumerate(b, 1):
            row.append(min(last[j] + 1, row[j - 1] + 1, last[j - 1] + (char != other)))
    return row[-1]


def check_option_keys(cfg: Config, options: dict | None) -> None:
    """A :class:`.UserError` for a ``--cfg-options`` key one or two edits from a sibling's."""
    for key, value in (options or {}).items():
        node, parts = cfg, key.split('.')
        for depth, part in enumerate(parts):
            if isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif not hasattr(node, 'keys') or part in node:
                node = node.get(part) if hasattr(node, 'keys') else None
            else:
                limit = 2 if len(part) >= 6 else 1 if len(part) >= 3 else 0
                edits, near = min(((_edits(part, k), k) for k in node.keys()
                                   if isinstance(k, str)), default=(0, ''))
                if 0 < edits <= limit:
                    raise UserError(f'--cfg-options {key}={value}: '
                                    f'{".".join(parts[:depth]) or "the config"} has no key '
                                    f'{part!r}; did you mean {".".join(parts[:depth] + [near])}?')
                break


def check_loop_keys(cfg: Config, loops=('train_cfg', 'val_cfg', 'test_cfg')) -> None:
    """A :class:`.UserError` for a key of ``loops`` that its loop class does not take."""
    from mmengine.registry import LOOPS as registry
    with suppress(ImportError):
        registry = importlib.import_module(f'{cfg.get("default_scope", None)}.registry').LOOPS
    for name in loops:
        loop = cfg.get(name, None)
        if not isinstance(loop, dict):
            continue
        by_epoch = name == 'train_cfg' and 'type' not in loop  # mmengine's rule without a type
        kind = loop.get('type') or dict(val_cfg='ValLoop', test_cfg='TestLoop').get(
            name, 'EpochBasedTrainLoop' if loop.get('by_epoch') else 'IterBasedTrainLoop')
        loop_class, params = None, {}
        with suppress(Exception):  # not resolvable here: the Runner will say
            loop_class = kind if isinstance(kind, type) else registry.get(kind)
            params = inspect.signature(loop_class.__init__).parameters
        if not params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
            continue
        taken = [p for p in params if p not in ('self', 'runner', 'dataloader', 'evaluator')]
        for key in loop:
            if key not in taken and key != 'type' and not (by_epoch and key == 'by_epoch'):
                close = ''.join(f'; did you mean {match}?' for match in
                                difflib.get_close_matches(key, taken, n=1, cutoff=0.6))
                raise UserError(f'{cfg.filename or "the config"}: {name}.{key}={loop[key]!r}: '
                                f'{loop_class.__name__} takes no {key!r}{close} (it takes '
                                f'{", ".join(taken)})')


def check_loaders(cfg: Config, loaders: list, cuda: bool) -> None:
    """``loaders``: ``persistent_workers`` off without workers; on a CPU workers <= cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    capped, persistent = [], []
    for name in loaders:
        loader = cfg.get(name, None)
        if not isinstance(loader, dict):
            continue
        if not cuda and (loader.get('num_workers') or 0) > (cores or 1):
            capped.append(f'{name}.num_workers {loader.num_workers}')
            loader.num_workers = cores
        if not loader.get('num_workers') and loader.get('persistent_workers'):
            persistent.append(name)
            loader.persistent_workers = False
    if capped:
        print_log(f'[afno_seg] {cores} CPU cores here: {", ".join(capped)} -> {cores}', 'current')
    if persistent:
        print_log(f'[afno_seg] {", ".join(persistent)}: num_workers=0, so persistent_workers='
                  'False (it keeps worker processes, there are none)', 'current')


def check_checkpoint(filename: str | None, role: str, training: bool = False) -> None:
    """A :class:`.CheckpointError` naming ``role`` for a local checkpoint with a wrong container
    header, or with ``training`` one without ``message_hub`` (mmengine: a ``KeyError``)."""
    if not filename or '://' in str(filename):
        return  # a URL: read (and refused) by the loader
    if osp.splitext(str(filename))[1] in ('.py', '.yml', '.yaml', '.json'):
        raise CheckpointError(f'{role} {filename} is a config file, not a checkpoint; the tools '
                              'take the config first, then the checkpoint')
    path = local_checkpoint_file(filename)
    safetensors = path.lower().endswith('.safetensors')
    with open(path, 'rb') as file:
        head = file.read(9)
    # safetensors: a header length, then JSON; torch: a whole zip (with its end) or a pickle
    if not (head[8:9] == b'{' and int.from_bytes(head[:8], 'little') < osp.getsize(path)
            if safetensors else zipfile.is_zipfile(path) or head[:1] == b'\x80'):
        kind = 'safetensors file' if safetensors else 'PyTorch checkpoint'
        raise CheckpointError(f'{filename} ({osp.getsize(path)} bytes) is not a readable {kind} '
                              '(no container header): damaged or not a checkpoint; pass another '
                              '(e.g. an earlier iter_*.pth)')
    keys = set() if safetensors else None  # the keys: a zip's pickled strings, not unpickled
    if training and not safetensors:
        with suppress(Exception), zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith('data.pkl'))
            ops = [(op.name, arg) for op, arg, _ in pickletools.genops(archive.read(name))]
            if all(arg.split(' ')[0].split('.')[0] in ('torch', 'collections', 'numpy', 'mmengine')
                   for op, arg in ops if op == 'GLOBAL'):  # else the safe loader names it
                keys = {arg for _, arg in ops if isinstance(arg, str)}
    if keys is not None and 'message_hub' not in keys:
        raise CheckpointError(f'{role} {path} is not a training checkpoint (weights only: no '
                              'message_hub, optimizer or scheduler state); to start from its '
                              f'weights, run without --resume with load_from={path}')


def _named_by_last_checkpoint(work_dir: str) -> str:
    """What ``work_dir/last_checkpoint`` names ('' without one)."""
    last = Path(work_dir, 'last_checkpoint')
    return last.read_text().strip() if last.is_file() else ''


def claim_work_dir(cfg: Config, overwrite: bool) -> None:
    """Refuse (:class:`.UserError`) a ``cfg.work_dir`` holding a run unless ``cfg.resume`` (off if
    nothing to resume); with ``overwrite`` move its files to ``work_dir/overwritten_<time>/``."""
    work_dir = cfg.work_dir
    names = os.listdir(work_dir) if osp.isdir(work_dir) else []
    checkpoint = osp.basename(_named_by_last_checkpoint(work_dir)) or max(
        (n for n in names if CHECKPOINT_RE.fullmatch(n)), default='',
        key=lambda n: int(CHECKPOINT_RE.fullmatch(n)[2]))
    match = CHECKPOINT_RE.fullmatch(checkpoint)  # the run in words: checkpoint, step, config
    where = f'{"iteration" if match[1] == "iter" else "epoch"} {match[2]}, ' if match else ''
    configs = ', '.join(n for n in sorted(names) if n.endswith('.py')) or 'not saved'
    run = f'{where}{checkpoint}, config {configs}' if checkpoint else None
    if cfg.get('resume') and run is None and not cfg.get('load_from'):
        cfg.resume = False  # nothing to resume: mmengine would start afresh, saying so twice
    if cfg.get('resume') or run is None:
        return
    if not overwrite:
        raise UserError(f'work_dir {work_dir} already holds a run ({run}): --resume continues '
                        'it, --overwrite starts over (its files move to a subfolder), or pass '
                        'another --work-dir')
    if int(os.environ.get('RANK', os.environ.get('SLURM_PROCID', 0))) != 0:
        return  # rank 0 moves them
    aside = osp.join(work_dir, f'overwritten_{time.strftime("%Y%m%d_%H%M%S")}')
    moved = [name for name in sorted(os.listdir(work_dir)) if name == 'last_checkpoint' or
             name.endswith(('.pth', '.py')) or RUN_FOLDER_RE.fullmatch(name)]
    os.makedirs(aside)
    for name in moved:
        shutil.move(osp.join(work_dir, name), aside)
    print_log(f'[afno_seg] --overwrite: {work_dir} held a run ({run}); its {len(moved)} files '
              f'and folders moved to {aside}/ (delete it when you no longer need them)',
              logger='current', level=logging.WARNING)


def finished_run(cfg: Config) -> str | None:
    """The checkpoint ``cfg.resume`` would resume if its name says the schedule is done."""
    checkpoint = cfg.get('load_from') or _named_by_last_checkpoint(cfg.work_dir)
    match = CHECKPOINT_RE.fullmatch(osp.basename(checkpoint))
    end = match and (cfg.get('train_cfg') or {}).get(f'max_{match[1]}s')  # max_iters, max_epochs
    return checkpoint if isinstance(end, int) and int(match[2]) >= end else None
