"""onnxruntime vs PyTorch on the real Cityscapes frame: logit parity and CPU time, per model.

    python tools/deployment/benchmark_onnx.py [--variants afno gfn ...] [--b3 afno esa]
        [--b3-scale 512 256] [--repeats 5] [--threads 1] [--out work_dirs/benchmark_onnx]

Models: the demo config with each mixer variant (random initialisation; the demo's test resize,
512x256), and the B3 configs named by ``--b3`` at full width with the test resize reduced to
``--b3-scale`` (whole-image inference). The frame (256x128 in ../shared/data) is scaled back
to 2048x1024 first. Writes ``OUT/benchmark_onnx.csv`` and ``OUT/benchmark_onnx.md`` (the table
and this run's command line).
"""
import argparse
import csv
import os.path as osp
import sys

import cv2
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import afno_seg  # noqa: F401
from afno_seg.deployment.benchmark import (
    MixerAlone,
    compare_backends,
    demo_model_configs,
    ensure_dir,
    markdown_table,
    prepared_input,
)
from afno_seg.deployment.startup import quiet_known_warnings

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FRAME = osp.join(ROOT, '..', 'shared', 'data', 'cityscapes_sample', 'leftImg8bit', 'val',
                 'frankfurt', 'frankfurt_000000_000294_leftImg8bit.png')
DEMO = osp.join(ROOT, 'configs', 'demo', 'segformer_afno_demo.py')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variants', nargs='*', help='mixer variants (default: all)')
    parser.add_argument('--b3', nargs='*', default=['afno', 'esa'],
                        help='B3 configs segformer_<name>_b3_cityscapes.py to add')
    parser.add_argument('--b3-scale', type=int, nargs=2, default=(512, 256), metavar=('W', 'H'),
                        help='test resize of the B3 configs')
    parser.add_argument('--mixers-alone', type=int, nargs=3, metavar=('H', 'W', 'C'),
                        help='also time each mixer variant by itself on an H x W grid of C '
                        'channels (e.g. 128 128 64: B3 stage 1 at a 512 crop)')
    parser.add_argument('--frame', default=FRAME, help='the image')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', default='work_dirs/benchmark_onnx')
    return parser.parse_args(argv)


def b3_config(name: str, scale) -> Config:
    cfg = Config.fromfile(osp.join(ROOT, 'configs', f'segformer_{name}_b3_cityscapes.py'))
    cfg.model.backbone.init_cfg = None
    cfg.model.test_cfg = dict(mode='whole')
    resize = [t for t in cfg.test_pipeline if t.type == 'Resize'][0]
    resize.scale = tuple(scale)
    return cfg


def mixers_alone(args) -> list:
    """Each variant's mixer by itself, built as the backbone builds it (stage 1 arguments)."""
    from afno_seg.backbones.stage import build_mixer
    height, width, channels = args.mixers_alone
    results = []
    for name, cfg in demo_model_configs(DEMO, args.variants).items():
        torch.manual_seed(0)
        mixer = build_mixer(dict(cfg.model.backbone.mixers), embed_dims=channels, num_heads=1,
                            sr_ratio=8, base_hw_shape=(height, width)).eval()
        tokens = torch.randn(1, height * width, channels)
        result = compare_backends(f'mixer-{name}', MixerAlone(mixer, (height, width)), tokens,
                                  args.repeats, args.threads)
        print(result, flush=True)
        results.append(result)
    return results


def main(argv=None) -> int:
    quiet_known_warnings()
    args = parse_args(argv)
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    image = cv2.resize(cv2.imread(args.frame), (2048, 1024), interpolation=cv2.INTER_LINEAR)
    configs = {f'demo-{k}': v for k, v in demo_model_configs(DEMO, args.variants).items()}
    configs.update({f'B3-{name}': b3_config(name, args.b3_scale) for name in args.b3 or []})
    results = []
    for name, cfg in configs.items():
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        model.init_weights()
        model.eval()
        inputs = prepared_input(cfg, image, model)
        result = compare_backends(name, model, inputs, args.repeats, args.threads)
        print(result, flush=True)
        results.append(result)
    if args.mixers_alone:
        results += mixers_alone(args)
    out = ensure_dir(args.out)
    with open(osp.join(out, 'benchmark_onnx.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0].row()))
        writer.writeheader()
        writer.writerows(r.row() for r in results)
    command = 'python ' + ' '.join([osp.relpath(__file__, ROOT)] + (argv or sys.argv[1:]))
    with open(osp.join(out, 'benchmark_onnx.md'), 'w') as f:
        f.write(f'`{command}` ({args.threads} thread(s), median of {args.repeats})\n\n')
        f.write(markdown_table(results))
    print(markdown_table(results))
    return 0


if __name__ == '__main__':
    sys.exit(main())
