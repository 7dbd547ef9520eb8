"""A trained segmentor from a config and a checkpoint, checked before anything heavy happens.

:func:`load_segmentor` is mmseg's ``init_model`` behind the checks every tool wants first (config,
checkpoint read as data, registered types, device) and after (the checkpoint fits the model:
a wrong file is refused, not run with random weights; classes and palette).
"""
import logging

from mmengine.config import Config

from ..decode_heads import use_low_res_fusion
from ..engine.checkpoint import load_checkpoint_file, state_dict_of
from ..engine.checkpoint_fit import load_state
from ..engine.errors import UserError, check_device
from ..engine.preflight import check_model_types
from ..engine.runner import load_config

__all__ = ['dataset_meta_for', 'load_segmentor', 'set_inference_mode']


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


def dataset_meta_for(meta: dict | None, cfg: Config, filename: str) -> dict:
    """Classes and palette: the checkpoint's ``meta['dataset_meta']``, else (converted or
    hand-made checkpoints have none) the config's test dataset's, with one line saying so."""
    dataset_meta = dict((meta or {}).get('dataset_meta') or {})
    if dataset_meta.get('classes') and dataset_meta.get('palette'):
        return dataset_meta
    from mmengine.logging import print_log
    from mmseg.registry import DATASETS
    dataset_cfg = (cfg.get('test_dataloader') or {}).get('dataset') or {}
    while 'dataset' in dataset_cfg:  # RepeatDataset and the like
        dataset_cfg = dataset_cfg['dataset']
    from_config = dict(getattr(DATASETS.get(dataset_cfg.get('type', '')), 'METAINFO', {}))
    from_config.update(dataset_cfg.get('metainfo') or {})
    if not from_config.get('classes') or not from_config.get('palette'):
        raise UserError(f'{filename} has no classes/palette in its meta, nor has the config\'s '
                        f'test_dataloader.dataset (type {dataset_cfg.get("type")})')
    print_log(f'{filename} has no classes/palette in its meta: using those of the config\'s '
              f'dataset {dataset_cfg.get("type")} ({len(from_config["classes"])} classes)',
              logger='current', level=logging.WARNING)
    dataset_meta.update(classes=from_config['classes'], palette=from_config['palette'])
    return dataset_meta


def load_segmentor(config: str, checkpoint: str, device: str = 'cpu',
                   cfg_options: dict | None = None, mode: str | None = None):
    """Check the inputs, build with mmseg's ``init_model``, load every tensor of the checkpoint.

    Args:
        config (str): Config file (a path or ``mmseg::...``).
        checkpoint (str): Checkpoint file: mmengine's (as tools/train.py writes) or a published
            ``.pth`` / ``.safetensors`` (tools/publish_model.py).
        device (str): ``'cpu'`` or ``'cuda'`` / ``'cuda:N'``. Default: 'cpu'.
        cfg_options (dict, optional): ``--cfg-options`` overrides. Default: None.
        mode (str, optional): ``'whole'`` or ``'slide'``; None keeps the config's. Default: None.

    Returns:
        The ``EncoderDecoder`` in eval mode on ``device``, with ``model.cfg`` and
        ``model.dataset_meta``; a ``SegformerHead`` is built as ``LowResFusionSegformerHead``.
    """
    # a missing config, or one swapped with the checkpoint: one line
    cfg = load_config(config, cfg_options=cfg_options, checkpoint=checkpoint)
    loaded = load_checkpoint_file(checkpoint, map_location='cpu')  # refused before any build
    meta = loaded.get('meta') if isinstance(loaded, dict) else None
    check_device(device)
    check_model_types(cfg)
    set_inference_mode(cfg, mode)
    use_low_res_fusion(cfg.model)
    from mmseg.apis import init_model  # after the checks: importing it is the slow part
    model = init_model(cfg, None, device='cpu')  # built, not initialised: the file holds all
    load_state(model, state_dict_of(loaded), checkpoint, cfg.get('checkpoint_new_keys', ()), meta)
    model.dataset_meta = dataset_meta_for(meta, cfg, checkpoint)
    return model.to(device).eval()
