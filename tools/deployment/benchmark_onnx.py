"""onnxruntime (DFT op / matmul forms) and OpenVINO vs PyTorch: logit parity and CPU time.

    python tools/deployment/benchmark_onnx.py [--variants afno gfn ...] [--b3 afno esa]
        [--b3-scale 512 256] [--mixers-alone H W C]... [--stage-points] [--no-demo]
        [--runtimes ort-op ort-matmul openvino] [--repeats 5] [--threads 1] [--pin-malloc]
        [--heads low-res stock] [--out work_dirs/benchmark_onnx] [--onnx-dir DIR]

Models: the demo config with each mixer variant (random initialisation; the demo's test resize,
512x256), and the B3 configs named by ``--b3`` at full width with the test resize reduced to
``--b3-scale`` (whole-image inference). The frame (256x128 in ../shared/data) is scaled back
to 2048x1024 first. Whole models build their decode head as ``load_segmentor`` does,
``LowResFusionSegformerHead``, in PyTorch and in the exports alike; ``--heads low-res stock``
adds a row per model with mmseg's ``SegformerHead`` as it computes (``NAME+stock-head``).
``--mixers-alone`` (repeatable) and ``--stage-points`` (SegFormer-B3's four stage points,
C @ H x W = 64 @ 256x256, 128 @ 128x128, 320 @ 64x64, 512 @ 32x32) time each variant's mixer
by itself. Every model is exported with the spectral transforms as ONNX ``DFT`` ops and as
matmuls; OpenVINO runs the matmul graph. Writes ``OUT/benchmark_onnx.csv`` and
``OUT/benchmark_onnx.md`` (the table and this run's command line).

``--pin-malloc`` (glibc): large blocks from the heap and no trimming (``mallopt``), so that
PyTorch eager's tensors of more than glibc's 32 MB mmap threshold are not page-faulted in anew
on every call; without it PyTorch's own time at a stage point varied 2x with the allocator's
history (AFNO at 128 @ 128x128: 51 ms in a fresh process, 24 ms after an export, 52 ms after
another), and the runtimes' ratios with it. onnxruntime and OpenVINO keep their own arenas.
"""
import argparse
import copy
import csv
import ctypes
import itertools
import os
import os.path as osp
import sys

import cv2
import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope

import afno_seg  # noqa: F401
from afno_seg.decode_heads import HEADS, use_low_res_fusion
from afno_seg.deployment import Segmenter
from afno_seg.deployment.benchmark import RUNTIMES, ParityResult, compare_backends
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.mixers import MixerAlone, mixer_variants

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
                        action='append', default=[],
                        help='also time each mixer variant by itself on an H x W grid of C '
                        'channels (e.g. 128 128 64: B3 stage 1 at a 512 crop); repeatable')
    parser.add_argument('--stage-points', action='store_true',
                        help='--mixers-alone at the four B3 stage points of a 1024 crop')
    parser.add_argument('--no-demo', action='store_true', help='no demo-size whole models')
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIMES, default=list(RUNTIMES))
    parser.add_argument('--max-param-mb', type=float, default=200.0,
                        help='skip a mixer alone with more parameter MB (FNO at wide stages)')
    parser.add_argument('--frame', default=FRAME, help='the image')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--pin-malloc', action='store_true',
                        help='glibc: large allocations from the heap, no trimming (steady '
                        'PyTorch eager times; see the module docstring)')
    parser.add_argument('--heads', nargs='+', choices=HEADS, default=['low-res'],
                        help="whole models' decode head: as load_segmentor runs it "
                        "(LowResFusionSegformerHead) and/or mmseg's SegformerHead as it computes")
    parser.add_argument('--out', default='work_dirs/benchmark_onnx')
    parser.add_argument('--onnx-dir', help='keep the exported graphs here (NAME-SIZE-FORM.onnx), '
                        'e.g. for tools/deployment/profile_onnx.py; default: deleted')
    return parser.parse_args(argv)


def demo_model_configs(variants: list[str] | None = None) -> dict[str, Config]:
    """The demo config with its mixer swapped for each variant (``variants``: short names)."""
    table = mixer_variants()
    configs = {}
    for name in variants or sorted(table):
        cfg = Config.fromfile(DEMO)
        mixer = dict(table[name])
        if mixer.get('type') == 'AFNOMixer':
            mixer['num_blocks'] = 4  # the demo's: 32-channel stage 1
        cfg.model.backbone.mixers = mixer
        configs[name] = cfg
    return configs


def b3_config(name: str, scale) -> Config:
    cfg = Config.fromfile(osp.join(ROOT, 'configs', f'segformer_{name}_b3_cityscapes.py'))
    cfg.model.backbone.init_cfg = None
    cfg.model.test_cfg = dict(mode='whole')
    resize = [t for t in cfg.test_pipeline if t.type == 'Resize'][0]
    resize.scale = tuple(scale)
    return cfg


B3_STAGE_POINTS = ((256, 256, 64), (128, 128, 128), (64, 64, 320), (32, 32, 512))


def mixers_alone(args) -> list:
    """Each variant's mixer by itself at each point, built as the backbone builds it (stage 1
    arguments: one head, reduction 8)."""
    from afno_seg.backbones.stage import build_mixer
    results = []
    points = list(args.mixers_alone) + (list(B3_STAGE_POINTS) if args.stage_points else [])
    for height, width, channels in points:
        for name, cfg in demo_model_configs(args.variants).items():
            mixer_cfg = dict(cfg.model.backbone.mixers)
            if mixer_cfg['type'] == 'AFNOMixer':
                mixer_cfg['num_blocks'] = 8  # the B3 configs'
            with torch.device('meta'):
                size = sum(p.numel() for p in build_mixer(
                    mixer_cfg, embed_dims=channels, num_heads=1, sr_ratio=8,
                    base_hw_shape=(height, width)).parameters()) * 4 / 2**20
            if size > args.max_param_mb:
                print(f'mixer-{name} at {channels} @ {height}x{width}: skipped, {size:.0f} MB of '
                      f'parameters > --max-param-mb {args.max_param_mb:g}', flush=True)
                continue
            torch.manual_seed(0)
            mixer = build_mixer(mixer_cfg, embed_dims=channels, num_heads=1, sr_ratio=8,
                                base_hw_shape=(height, width)).eval()
            tokens = torch.randn(1, height * width, channels)
            result = compare_backends(f'mixer-{name}', MixerAlone(mixer, (height, width)),
                                      tokens, args.repeats, args.threads,
                                      runtimes=tuple(args.runtimes), onnx_dir=args.onnx_dir)
            print(result, flush=True)
            results.append(result)
    return results


def markdown_table(results: list[ParityResult]) -> str:
    """The results as a Markdown table: time ratios to PyTorch eager per runtime, the op form's
    time over the matmul form's in onnxruntime, and the parity of every runtime."""
    lines = ['| model | input | ORT op / PyTorch | ORT matmul / PyTorch | OpenVINO / PyTorch | '
             'ORT op / matmul | max abs diff (op, matmul, OpenVINO) | max abs logit | '
             'lowest argmax agreement |', '|---|---|---|---|---|---|---|---|---|']
    for r in results:
        row = r.row()
        lowest = min((v['argmax_agreement'] for v in r.runtimes.values()), default=np.nan)
        agreement = '-' if np.isnan(lowest) else f'{100 * lowest:.3f}%'  # NaN: no classes
        diffs = ', '.join(f'{row[f"{runtime}_max_abs_diff"]:.1e}' for runtime in RUNTIMES)
        lines.append(f'| {r.model} | {r.input_hw} | {row["ort-op_ratio"]:.2f} | '
                     f'{row["ort-matmul_ratio"]:.2f} | {row["openvino_ratio"]:.2f} | '
                     f'{row["ort-op_ms"] / row["ort-matmul_ms"]:.2f} | {diffs} | '
                     f'{r.max_abs_logit:.3g} | {agreement} |')
    return '\n'.join(lines) + '\n'


def pin_malloc() -> None:
    """glibc's ``mallopt``: mmap threshold and trim threshold 1 GiB (``M_MMAP_THRESHOLD`` -3,
    ``M_TRIM_THRESHOLD`` -1), so freed large blocks are reused without new page faults."""
    libc = ctypes.CDLL('libc.so.6')
    if not (libc.mallopt(-3, 1 << 30) and libc.mallopt(-1, 1 << 30)):
        raise OSError('mallopt failed')


def main(argv=None) -> int:
    quiet_known_warnings()
    args = parse_args(argv)
    if args.pin_malloc:
        pin_malloc()
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    image = cv2.resize(cv2.imread(args.frame), (2048, 1024), interpolation=cv2.INTER_LINEAR)
    configs = {} if args.no_demo else {
        f'demo-{k}': v for k, v in demo_model_configs(args.variants).items()}
    configs.update({f'B3-{name}': b3_config(name, args.b3_scale) for name in args.b3 or []})
    results = []
    for (name, base_cfg), head in itertools.product(configs.items(), args.heads):
        cfg = copy.deepcopy(base_cfg)
        if head == 'low-res':  # as load_segmentor builds it, for PyTorch and the export alike
            use_low_res_fusion(cfg.model)
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        model.init_weights()
        model.eval()
        model.cfg = cfg  # Segmenter's test pipeline comes from it, as after mmseg's init_model
        # the normalised (1, 3, H, W) image: what encode_decode and the exported graph take
        prepared = Segmenter(model).prepare(image)
        inputs = model.data_preprocessor(pseudo_collate([prepared]), False)['inputs']
        result = compare_backends(name if head == 'low-res' else f'{name}+stock-head', model,
                                  inputs, args.repeats, args.threads,
                                  runtimes=tuple(args.runtimes), onnx_dir=args.onnx_dir)
        print(result, flush=True)
        results.append(result)
    results += mixers_alone(args)
    out = args.out
    os.makedirs(out, exist_ok=True)
    with open(osp.join(out, 'benchmark_onnx.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0].row()))
        writer.writeheader()
        writer.writerows(r.row() for r in results)
    command = 'python ' + ' '.join([osp.relpath(__file__, ROOT)] + (argv or sys.argv[1:]))
    with open(osp.join(out, 'benchmark_onnx.md'), 'w') as f:
        f.write(f'`{command}` ({args.threads} thread(s), median of {args.repeats})\n\n')
        f.write(markdown_table(results))
    print(markdown_table(results))
    print(f'wrote {osp.join(out, "benchmark_onnx.csv")}, {osp.join(out, "benchmark_onnx.md")}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
