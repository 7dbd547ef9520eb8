"""GPU check of every SegFormer-B3 Cityscapes config: a few fp16 training iterations at 1024x1024.

For each ``configs/segformer_*_b3_cityscapes.py`` the full segmentor (random init, no pretrained
file, no dataset) is trained for ``--warmup + --iters`` iterations on random images and labels,
batch 1, with the config's own optimizer wrapper (AmpOptimWrapper, dynamic loss scale;
``--precision`` as in tools/train.py). Recorded: median seconds per iteration after warm-up, peak
allocated GPU memory, the activations saved for backward in the last iteration (the device
independent figure tools/analysis/step_memory.py gives on a CPU), whether every loss was finite,
the loss scale (start, end, drops during the measured iterations: "stable" = none), and the
loss-scale check (fp16): a gradient made infinite must skip the optimizer step (no weight moves)
and halve the scale, and two finite steps (growth interval 2 for the check) must double it back.
Results go to ``<out>/gpu_check_b3.csv`` and ``<out>/gpu_check_b3.md`` (with the command line and
versions), ready to paste into BENCHMARKS.md. A config that fails (e.g. out of memory) is recorded
with its error and the others still run.

A known-good model through the evaluation path: when the folder of
``nvidia/segformer-b3-finetuned-cityscapes-1024-1024`` is present (``--published``, as
``hf download`` leaves it) and Cityscapes val is (``--cityscapes``), it is converted
(tools/model_converters/segformer2afno_seg.py) and evaluated by tools/test.py with
``configs/published/segformer_mit-b3_cityscapes-1024x1024.py`` on the first ``--val-frames``
val frames; the mIoU is printed and written beside the table (the whole val split gives about
81.7; a few frames scatter around it, far above a broken path's near-zero).

Usage (one GPU; about 2-4 minutes on an H100/H200 class GPU)::

    python tools/analysis/gpu_check_b3.py [--iters 10] [--warmup 5] [--out work_dirs/gpu_check_b3]
    python tools/analysis/gpu_check_b3.py --dry-run   # CPU, B0 at 64x64, fp16: checks the script
"""
import argparse
import csv
import glob
import logging
import math
import os
import os.path as osp
import statistics
import sys
import time

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FIELDS = ['config', 'mixers', 'params_M', 'crop', 'iters', 'sec_per_iter', 'peak_mem_GiB',
          'saved_GiB', 'loss_first', 'loss_last', 'loss_finite', 'scale_start', 'scale_end',
          'scale_drops', 'scale_stable', 'scale_check', 'status']


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--configs', nargs='+',
                        default=sorted(glob.glob(osp.join(ROOT, 'configs',
                                                          'segformer_*_b3_cityscapes.py'))))
    parser.add_argument('--crop', type=int, default=1024, help='square crop size')
    parser.add_argument('--iters', type=int, default=10, help='measured iterations')
    parser.add_argument('--warmup', type=int, default=5, help='iterations before measuring')
    parser.add_argument('--with-cp', action='store_true', help='gradient checkpointing')
    parser.add_argument('--out', default=osp.join(ROOT, 'work_dirs', 'gpu_check_b3'))
    parser.add_argument('--precision', choices=['fp16', 'bf16', 'fp32'], default='fp16',
                        help='fp16: the configs\' AmpOptimWrapper (on a CPU its CPU form)')
    parser.add_argument('--dry-run', action='store_true',
                        help='CPU, arch b0, 64x64 crop, 1+1 iterations')
    parser.add_argument('--published', default='data/pretrained/segformer-b3-cityscapes',
                        help='transformers folder of the published SegFormer-B3 Cityscapes model')
    parser.add_argument('--cityscapes', default='data/cityscapes', help='Cityscapes root')
    parser.add_argument('--val-frames', type=int, default=8,
                        help='val frames the published model is evaluated on')
    return parser.parse_args(argv)


def published_miou(args: argparse.Namespace) -> str:
    """The published SegFormer-B3's mIoU on the first val frames, through the converter and
    tools/test.py as a user runs them (separate processes); or why it did not run."""
    import json
    import subprocess
    if not osp.isdir(args.published) or not osp.isdir(osp.join(args.cityscapes, 'gtFine', 'val')):
        return f'skipped (no {args.published} or no {args.cityscapes}/gtFine/val)'
    out = osp.join(args.out, 'published')
    checkpoint = osp.join(out, 'segformer-b3-cityscapes.pth')
    config = osp.join(ROOT, 'configs', 'published', 'segformer_mit-b3_cityscapes-1024x1024.py')
    root = args.cityscapes.rstrip('/') + '/'
    commands = [
        [osp.join(ROOT, 'tools', 'model_converters', 'segformer2afno_seg.py'), args.published,
         checkpoint, '--config', config],
        [osp.join(ROOT, 'tools', 'test.py'), config, checkpoint, '--work-dir', out,
         '--cfg-options', f'test_dataloader.dataset.indices={args.val_frames}',
         f'test_dataloader.dataset.data_root={root}']]
    for command in commands:
        result = subprocess.run([sys.executable] + command, capture_output=True, text=True)
        if result.returncode:
            return f'failed: {osp.basename(command[0])}: {result.stderr.strip()[-300:]}'
    metrics = sorted(glob.glob(osp.join(out, '*', '*.json')))[-1]
    with open(metrics) as f:
        miou = json.load(f)['mIoU']
    return f'{miou:.2f} mIoU on {args.val_frames} Cityscapes val frames (whole val: about 81.7)'



def prepare_cfg(path: str, args: argparse.Namespace):
    from mmengine.config import Config

    from afno_seg.backbones.mixer_mit import ARCH_SETTINGS
    cfg = Config.fromfile(path)
    backbone = cfg.model.backbone
    backbone.with_cp = args.with_cp
    cfg.model.data_preprocessor.size = (args.crop, args.crop)
    if args.dry_run:
        sizes = ARCH_SETTINGS['b0']
        backbone.arch = 'b0'
        cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
        cfg.model.decode_head.channels = 32
    return cfg


def loss_scale_check(model, optim_wrapper, data, device: torch.device) -> str:
    """'ok', or what went wrong: an injected inf gradient skips the step and halves the scale,
    two finite steps double it back (the check's own scaler, growth interval 2)."""
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    if scaler is None or not scaler.is_enabled():
        return 'no loss scale'
    saved, scale = scaler, scaler.get_scale()
    optim_wrapper.loss_scaler = torch.amp.GradScaler(device.type, init_scale=scale,
                                                     growth_interval=2)
    try:
        params = [p for p in model.parameters() if p.requires_grad]
        before = [p.detach().clone() for p in params]
        hook = params[-1].register_hook(lambda grad: grad * float('inf'))
        model.train_step(data, optim_wrapper)
        hook.remove()
        moved = sum(not torch.equal(p, b) for p, b in zip(params, before))
        after_skip = optim_wrapper.loss_scaler.get_scale()
        for _ in range(2):
            model.train_step(data, optim_wrapper)
        grown = optim_wrapper.loss_scaler.get_scale()
    finally:
        optim_wrapper.loss_scaler = saved
    problems = ([f'{moved} parameters moved in the skipped step'] if moved else []) + (
        [f'scale {scale} -> {after_skip} on overflow (expected {scale / 2})']
        if after_skip != scale / 2 else []) + (
        [f'scale {after_skip} -> {grown} after 2 finite steps (expected {scale})']
        if grown != scale else [])
    return '; '.join(problems) or 'ok'


def check_config(path: str, args: argparse.Namespace, device: torch.device) -> dict:
    from afno_seg.analysis.memory import SavedTensorBytes, build_for_step, random_batch
    cfg = prepare_cfg(path, args)
    mixers = cfg.model.backbone.mixers
    mixers = [mixers] if isinstance(mixers, dict) else mixers
    row = dict(config=osp.basename(path), crop=args.crop, iters=args.iters,
               mixers='/'.join(m['type'].replace('Mixer', '') for m in mixers))
    model, optim_wrapper = build_for_step(cfg, args.precision, device)
    row['params_M'] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    scaler = scaler if scaler is not None and scaler.is_enabled() else None
    generator = torch.Generator().manual_seed(0)
    losses, times, scales = [], [], [scaler.get_scale() if scaler else 1.0]
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.warmup + args.iters):
        data = random_batch(args.crop, cfg.model.decode_head.num_classes, generator)
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        counter = SavedTensorBytes(model.parameters())  # what backward keeps (the last counts)
        with counter:
            log_vars = model.train_step(data, optim_wrapper)
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(float(torch.as_tensor(log_vars['loss']).detach()))
        scales.append(scaler.get_scale() if scaler else 1.0)
    measured_scales = scales[args.warmup:]
    drops = sum(b < a for a, b in zip(measured_scales, measured_scales[1:]))
    row.update(
        sec_per_iter=round(statistics.median(times[args.warmup:]), 4),
        peak_mem_GiB=round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if device.type == 'cuda' else '', saved_GiB=round(counter.bytes / 2**30, 3),
        loss_first=round(losses[0], 4), loss_last=round(losses[-1], 4),
        loss_finite=all(math.isfinite(v) for v in losses), scale_start=scales[0],
        scale_end=scales[-1], scale_drops=drops, scale_stable=drops == 0,
        scale_check=loss_scale_check(model, optim_wrapper, data, device))
    row['status'] = 'ok' if row['scale_check'] in ('ok', 'no loss scale') else 'scale check failed'
    return row


def write_results(rows: list[dict], args: argparse.Namespace, device: torch.device,
                  published: str = '') -> None:
    os.makedirs(args.out, exist_ok=True)
    with open(osp.join(args.out, 'gpu_check_b3.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU (dry run)'
    lines = [f'# SegFormer-B3 {args.crop}x{args.crop} training check, batch 1, {name}', '',
             f'`{" ".join([osp.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`  ',
             f'torch {torch.__version__}, CUDA {torch.version.cuda}, with_cp={args.with_cp}, '
             f'{args.warmup} warm-up + {args.iters} measured iterations; seconds/iter is the '
             'median of the measured ones.', '',
             '| ' + ' | '.join(FIELDS) + ' |', '|' + '---|' * len(FIELDS)]
    lines += ['| ' + ' | '.join(str(row.get(k, '')) for k in FIELDS) + ' |' for row in rows]
    lines += ['', f'Published SegFormer-B3 Cityscapes (configs/published/): {published}']
    with open(osp.join(args.out, 'gpu_check_b3.md'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def main(argv=None) -> int:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import afno_seg  # noqa: F401  (registers MixerMiT, the mixers, the CPU optimizer wrapper)
    args = parse_args(argv)
    if args.dry_run:
        args.crop, args.iters, args.warmup = 64, 1, 1
        device = torch.device('cpu')
    elif not torch.cuda.is_available():
        print('error: no CUDA device; use --dry-run to check the script on a CPU', file=sys.stderr)
        return 1
    else:
        device = torch.device('cuda')
        torch.backends.cudnn.benchmark = True  # as the configs' env_cfg: fixed input size
    init_default_scope('mmseg')
    # Keep the console to warnings and the results (no per-parameter lr / init listings).
    MMLogger.get_current_instance().setLevel(logging.WARNING)
    rows = []
    for path in args.configs:
        try:
            rows.append(check_config(path, args, device))
        except Exception as error:  # noqa: BLE001  (record it, go on with the next config)
            rows.append(dict(config=osp.basename(path), crop=args.crop,
                             status=f'{type(error).__name__}: {str(error).splitlines()[0][:200]}'))
        print(rows[-1], flush=True)
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    published = published_miou(args)
    print(f'published SegFormer-B3 Cityscapes: {published}')
    write_results(rows, args, device, published)
    return 0 if all(r['status'] == 'ok' for r in rows) else 2


if __name__ == '__main__':
    sys.exit(main())
