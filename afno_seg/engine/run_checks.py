"""Checks of the work_dir and the data splits, run by the tools before a Runner is built.

- :func:`check_work_dir`: the work_dir can be created and written. mmengine would otherwise fail
  inside ``Runner.__init__`` with a bare ``PermissionError``/``NotADirectoryError`` traceback, or,
  for a folder that is read-only only for files, at the first checkpoint, hours later.
- :func:`check_splits_not_empty`: every split a loop will read has at least one sample. An empty
  split makes mmengine fail with ``ValueError: need at least one array to concatenate`` (while
  serialising the empty data list), which names neither the split nor the folder.

The free space for a checkpoint is checked once the model exists, by
:class:`~afno_seg.engine.checkpoint_hook.AtomicCheckpointHook`.
"""
import inspect
import os
import os.path as osp
from contextlib import suppress

from mmengine.config import Config

from .errors import UserError
from .preflight import image_folder, loader_datasets

__all__ = ['EmptySplitError', 'WorkDirError', 'check_splits_not_empty', 'check_work_dir']


class WorkDirError(UserError):
    """The work_dir cannot be created or written."""


class EmptySplitError(UserError):
    """A dataset split named by the config holds no sample."""


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


def _default_argument(dataset_type, name: str, fallback):
    """The default of ``name`` in the registered dataset class's ``__init__``."""
    from mmseg.registry import DATASETS
    with suppress(Exception):
        cls = DATASETS.get(dataset_type) if isinstance(dataset_type, str) else dataset_type
        default = inspect.signature(cls.__init__).parameters[name].default
        if default is not inspect.Parameter.empty:
            return default
    return fallback


def _has_file_with_suffix(folder: str, suffix, ignore_case: bool = False) -> bool:
    suffixes = (suffix, ) if isinstance(suffix, str) else tuple(suffix)
    if ignore_case:
        suffixes = tuple(s.lower() for s in suffixes)
    for _, _, files in os.walk(folder, followlinks=True):
        if any((name.lower() if ignore_case else name).endswith(suffixes) for name in files):
            return True
    return False


# mmpretrain's CustomDataset/ImageNet image extensions (matched case-insensitively: ImageNet's
# files end in '.JPEG').
MMPRETRAIN_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif')


def check_splits_not_empty(cfg: Config, loaders=('train_dataloader', 'val_dataloader',
                                                 'test_dataloader')) -> None:
    """Raise :class:`EmptySplitError` for a split without samples (folders that exist)."""
    source = cfg.filename or 'the config'
    for loader, dataset in loader_datasets(cfg, loaders):
        root = dataset.get('data_root', '') or ''
        ann_file = dataset.get('ann_file', '') or ''
        if ann_file:
            path = ann_file if osp.isabs(ann_file) else osp.join(root, ann_file)
            if osp.isfile(path):
                with open(path) as file:
                    if not any(line.strip() for line in file):
                        raise EmptySplitError(
                            f'{source}: {loader}.dataset.ann_file {path} lists no sample '
                            '(the file is empty); the split would have no data.')
                continue
        folder = image_folder(dataset)
        if not osp.isdir(folder):
            continue  # a missing folder is check_data_roots' business
        if cfg.get('default_scope', None) == 'mmpretrain':
            suffix = tuple(dataset.get('extensions') or MMPRETRAIN_EXTENSIONS)
            ignore_case = True
        else:
            suffix = dataset.get('img_suffix') or _default_argument(dataset.get('type'),
                                                                    'img_suffix', '.jpg')
            ignore_case = False
        if not _has_file_with_suffix(folder, suffix, ignore_case):
            raise EmptySplitError(
                f'{source}: {loader}.dataset has no samples: no file ending in {suffix!r} '
                f'under {folder} (searched recursively). Check data_root, '
                'data_prefix.img_path and img_suffix, or regenerate the data (for Cityscapes: '
                'leftImg8bit/<split>/<city>/*_leftImg8bit.png).')
