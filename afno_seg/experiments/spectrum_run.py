"""Spectral analysis of one checkpoint: load the model and images, probe, write JSON + arrays.

:func:`run_spectrum` is ``tools/analysis/spectrum.py`` and the study's spectrum step.
"""
import json
from pathlib import Path

import numpy as np
import torch

from ..engine.errors import UserError
from .receptive_field import effective_receptive_fields, erf_radius
from .spectrum import MixerProbe, gfn_filters

__all__ = ['analyze_model', 'default_images', 'load_images', 'run_spectrum', 'write_results']


def run_spectrum(config: str, checkpoint: str, out_dir: str | Path, images: list[str] | None = None,
                 num_images: int = 4, size: tuple[int, int] | None = None, num_bands: int = 16,
                 resample_factor: float = 2.0, erf: bool = True, title: str | None = None,
                 cfg_options: dict | None = None) -> tuple[dict, list[Path]]:
    """``tools/analysis/spectrum.py CONFIG CHECKPOINT``: the segmentor (loaded on the CPU by
    :func:`afno_seg.deployment.load_segmentor`) probed on ``images`` (default: the first
    ``num_images`` of the test split) and ERFs; JSON, arrays and figures (titled ``title``, default
    the config's name) written into ``out_dir``. Returns the results and the paths written."""
    from ..deployment.model import load_segmentor
    from .spectrum_plots import plot_run
    torch.set_grad_enabled(True)
    model = load_segmentor(config, checkpoint, cfg_options=cfg_options)
    paths = images or default_images(model.cfg, num_images)
    results, arrays = analyze_model(model, load_images(model, paths, size), num_bands,
                                    resample_factor, erf)
    results.update(config=config, checkpoint=checkpoint, images=[str(p) for p in paths])
    written = write_results(Path(out_dir), results, arrays)
    return results, written + plot_run(results, arrays, Path(out_dir), title or Path(config).stem)


def default_images(cfg, count: int) -> list[str]:
    """The first ``count`` images of the config's test split."""
    from mmseg.registry import DATASETS
    try:
        dataset = DATASETS.build(dict(cfg.test_dataloader.dataset, pipeline=[]))
    except (FileNotFoundError, OSError) as error:
        raise UserError(f'cannot list the test images of the config ({error}); give IMAGES or '
                        'fix test_dataloader.dataset.data_root') from None
    paths = [dataset.get_data_info(i)['img_path'] for i in range(min(count, len(dataset)))]
    if not paths:
        raise UserError('the test split of the config has no images; give IMAGES')
    return paths


def load_images(model, paths: list[str], size: tuple[int, int] | None = None) -> list:
    """``(1, 3, H, W)`` model inputs: each image resized as the test pipeline (or to ``size``
    ``(H, W)``) and normalised by the model's data preprocessor."""
    from mmcv.transforms import Compose
    if size is not None:
        resize = dict(type='Resize', scale=(size[1], size[0]), keep_ratio=False)
    else:
        resize = next((dict(step) for step in model.cfg.test_dataloader.dataset.pipeline
                       if step.get('type') == 'Resize'), None)
    pipeline = Compose([dict(type='LoadImageFromFile'), *([resize] if resize else []),
                        dict(type='PackSegInputs')])
    inputs = []
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f'image not found: {path}')
        packed = pipeline(dict(img_path=str(path), seg_fields=[], reduce_zero_label=False))
        data = model.data_preprocessor(dict(inputs=[packed['inputs']],
                                            data_samples=[packed['data_samples']]), False)
        inputs.append(data['inputs'].float())
    return inputs


def analyze_model(model, images: list, num_bands: int = 16, resample_factor: float = 2.0,
                  erf: bool = True) -> tuple[dict, dict]:
    """Probe the mixers over ``images`` and compute ERFs; returns ``(json_dict, arrays)``."""
    probe = MixerProbe(model, num_bands)
    with probe, torch.no_grad():
        for image in images:
            model.backbone(image)
    results = probe.results()
    filters = gfn_filters(model, resample_factor, num_bands)
    results['gfn'] = [{k: v for k, v in f.items() if k not in ('stored', 'resampled')}
                      for f in filters] or None
    arrays = {f"gfn_{kind}_{f['name']}": f[kind].numpy()
              for f in filters for kind in ('stored', 'resampled')}
    if erf:
        maps = effective_receptive_fields(model.backbone, images, ['stage1', 'backbone'], [0, -1])
        results['erf'] = {name: dict(r50=erf_radius(m, 0.5), r90=erf_radius(m, 0.9),
                                     peak=float(m.max()), total=float(m.sum()))
                          for name, m in maps.items()}
        arrays.update({f'erf_{name}': m.numpy() for name, m in maps.items()})
    results['input_hw'] = list(images[0].shape[-2:])
    return results, arrays


def _finite(value):
    """``value`` with every NaN float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def write_results(out_dir: Path, results: dict, arrays: dict) -> list[Path]:
    """``spectrum.json`` and ``arrays.npz`` (ERF maps, GFN |K|) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, npz_path = out_dir / 'spectrum.json', out_dir / 'arrays.npz'
    json_path.write_text(json.dumps(_finite(results), indent=1, default=float) + '\n')
    np.savez_compressed(npz_path, **arrays)
    return [json_path, npz_path]
