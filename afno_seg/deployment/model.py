"""A trained segmentor from a config and a checkpoint, checked before anything heavy happens.

:func:`load_segmentor` is mmseg's ``init_model`` (the model in eval mode with ``model.cfg`` and
the classes and palette of the checkpoint's ``dataset_meta``) behind the checks every tool wants
first: the config exists, the checkpoint is a readable checkpoint (named in one line otherwise,
:func:`~afno_seg.engine.preflight.check_checkpoint`), every ``type=`` of the model is registered,
the requested device exists; plus the inference mode (``whole``/``slide``) a user may ask for.
"""
import os.path as osp

import torch
from mmengine.config import Config

from ..engine.errors import UserError
from ..engine.preflight import check_checkpoint, check_model_types

__all__ = ['load_segmentor', 'set_inference_mode']


def set_inference_mode(cfg: Config, mode: str | None) -> None:
    """Set ``cfg.model.test_cfg.mode`` to ``'whole'`` or ``'slide'`` (``None``: keep the config's).

    Sliding windows need ``crop_size`` and ``stride``; a config without them gets the training
    crop (``model.data_preprocessor.size``) and a stride of 3/4 of it, the ratio of mmseg's
    Cityscapes recipes (1024/768).
    """
    if mode is None:
        return
    if mode not in ('whole', 'slide'):
        raise UserError(f"--mode must be 'whole' or 'slide', got {mode!r}")
    test_cfg = cfg.model.setdefault('test_cfg', {})
    test_cfg['mode'] = mode
    if mode == 'slide' and not test_cfg.get('crop_size'):
        crop = (cfg.model.get('data_preprocessor') or {}).get('size')
        if not crop:
            raise UserError(f'--mode slide needs model.test_cfg.crop_size and stride in '
                            f'{cfg.filename} (or model.data_preprocessor.size to derive them)')
        test_cfg['crop_size'] = tuple(crop)
        test_cfg['stride'] = tuple(max(1, 3 * size // 4) for size in crop)


def check_device(device: str) -> None:
    """A clear error for ``cuda`` on a machine without it."""
    if device.startswith('cuda') and not torch.cuda.is_available():
        raise UserError(f'--device {device}: no CUDA device is available here (use --device cpu)')


def load_segmentor(config: str, checkpoint: str, device: str = 'cpu',
                   cfg_options: dict | None = None, mode: str | None = None):
    """Check the inputs, then build the segmentor with mmseg's ``init_model``.

    Args:
        config (str): Config file.
        checkpoint (str): Checkpoint file (mmengine's, as tools/train.py writes).
        device (str): ``'cpu'`` or ``'cuda'`` / ``'cuda:N'``. Default: 'cpu'.
        cfg_options (dict, optional): ``--cfg-options`` overrides. Default: None.
        mode (str, optional): ``'whole'`` or ``'slide'``; None keeps the config's. Default: None.

    Returns:
        The ``EncoderDecoder`` in eval mode on ``device``, with ``model.cfg``.
    """
    if not osp.isfile(config):
        raise UserError(f'config file not found: {config}')
    check_checkpoint(checkpoint)
    check_device(device)
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_model_types(cfg)
    set_inference_mode(cfg, mode)
    from mmseg.apis import init_model  # after the checks: importing it is the slow part
    return init_model(cfg, checkpoint, device=device)
