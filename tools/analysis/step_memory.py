"""Memory of one training step of each SegFormer-B3 config at the real crop, per precision.

For each config (default: every ``configs/segformer_*_b3_cityscapes.py``) and each precision the
full segmentor is built with random weights (no pretrained file, no dataset; SyncBN as BN) and
its config's AdamW, and one training step (forward, loss, backward, optimizer step) runs on a
random batch at ``--crop`` (default the recipe's 1024x1024, batch 1). One model at a time, freed
before the next. Recorded (:mod:`afno_seg.analysis.memory`):

* ``saved_mb``: activations saved for backward (``saved_tensors_hooks``; device independent);
* ``peak_mb``: peak memory of the step beyond what was allocated before it (CPU: profiler
  allocation events; CUDA: ``max_memory_allocated``); ``params_mb``: parameters and buffers;
  ``total_gib`` = params + peak: what one GPU must hold for this step (before the CUDA context);
* ``fits``: the card sizes (16/24/40/80 GB) with ``total_gib`` + 2 GiB (CUDA context, cuDNN
  workspace, fragmentation) to spare.

``--fake`` counts only ``saved_mb``, under ``FakeTensorMode`` (shapes, no arithmetic: seconds per
config where a real step at 1024x1024 takes minutes on a CPU), and ``state_mb`` = parameters,
gradients and AdamW's two moments (16 bytes a parameter); ``total_gib`` is then state + saved, a
lower bound of the step's peak (no temporaries).

Each row is written to ``<out>/step_memory{tag}.{csv,md}`` as soon as it is measured, so an
interrupted run keeps what it measured. A config that fails (out of memory) is a row with its
error.

Usage::

    python tools/analysis/step_memory.py --precisions fp32 fp16 --out docs/benchmarks  # CPU
    python tools/analysis/step_memory.py --device cuda --precisions fp32 fp16 --out OUT
    python tools/analysis/step_memory.py --quick --out /tmp/m  # seconds: B0, 64 px
"""
import argparse
import csv
import gc
import glob
import logging
import os
import os.path as osp
import sys
import time

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FIELDS = ['config', 'mixers', 'precision', 'crop', 'batch', 'params_m', 'saved_mb', 'peak_mb',
          'params_mb', 'state_mb', 'total_gib', 'fits', 'step_s', 'status']
CARDS_GB = (16, 24, 40, 80)
MARGIN_GIB = 2.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--configs', nargs='+', help='config files (default: every '
                        'configs/segformer_*_b3_cityscapes.py)')
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--precisions', nargs='+', default=['fp32', 'fp16'],
                        choices=['fp32', 'fp16', 'bf16'])
    parser.add_argument('--crop', type=int, default=1024, help='square crop size')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--threads', type=int, help='torch CPU threads (default: torch\'s)')
    parser.add_argument('--fake', action='store_true', help='saved bytes only, counted under '
                        'FakeTensorMode (no arithmetic), with parameter/gradient/AdamW state')
    parser.add_argument('--quick', action='store_true',
                        help='smoke test: arch b0 with a 32-channel head, 64 px crop')
    parser.add_argument('--out', default=osp.join(ROOT, 'work_dirs', 'step_memory'))
    parser.add_argument('--tag', default='', help='suffix of the output file names')
    args = parser.parse_args(argv)
    args.configs = args.configs or sorted(
        glob.glob(osp.join(ROOT, 'configs', 'segformer_*_b3_cityscapes.py')))
    if args.quick:
        args.crop = 64
    args.command = ' '.join(['python', osp.relpath(osp.abspath(sys.argv[0]), ROOT)] +
                            list(sys.argv[1:] if argv is None else argv))
    return args


def load_cfg(path: str, args: argparse.Namespace):
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    backbone = cfg.model.backbone
    if 'base_img_size' in backbone:
        backbone.base_img_size = args.crop  # GFN's filters at the crop's grids, as when training
    cfg.model.data_preprocessor.size = (args.crop, args.crop)
    if args.quick:
        from afno_seg.backbones.mixer_mit import ARCH_SETTINGS
        backbone.arch = 'b0'
        sizes = ARCH_SETTINGS['b0']
        cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
        cfg.model.decode_head.channels = 32
    return cfg


def measure(path: str, precision: str, args, device: torch.device) -> dict:
    from afno_seg.analysis.memory import build_for_step, fake_saved_bytes, random_batch, step_memory
    cfg = load_cfg(path, args)
    mixers = cfg.model.backbone.mixers
    mixers = [mixers] if isinstance(mixers, dict) else mixers
    row = dict(config=osp.basename(path), precision=precision, crop=args.crop, batch=args.batch,
               mixers='/'.join(m['type'].replace('Mixer', '') for m in mixers))
    model, optim_wrapper = build_for_step(cfg, precision, device)
    row['params_m'] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    if args.fake:
        state = sum(p.numel() for p in model.parameters()) * 16  # weight, grad, 2 moments
        saved = fake_saved_bytes(model, args.crop, args.batch, precision)
        return dict(row, saved_mb=round(saved / 2**20), state_mb=round(state / 2**20),
                    status='ok (fake)', **_total((state + saved) / 2**30))
    data = random_batch(args.crop, cfg.model.decode_head.num_classes,
                        torch.Generator().manual_seed(0), args.batch)
    start = time.perf_counter()
    memory = step_memory(lambda: model.train_step(data, optim_wrapper), model, device)
    row.update(step_s=round(time.perf_counter() - start, 1),
               saved_mb=round(memory['saved_bytes'] / 2**20), status='ok',
               peak_mb=round(memory['peak_bytes'] / 2**20),
               params_mb=round(memory['before_bytes'] / 2**20),
               **_total((memory['before_bytes'] + memory['peak_bytes']) / 2**30))
    return row


def _total(gib: float) -> dict:
    fits = [str(c) for c in CARDS_GB if gib + MARGIN_GIB <= c * 1e9 / 2**30]
    return dict(total_gib=round(gib, 2), fits='/'.join(fits) or 'none')


def write(rows: list[dict], args, environment: str) -> None:
    os.makedirs(args.out, exist_ok=True)
    stem = osp.join(args.out, f'step_memory{args.tag}')
    with open(stem + '.csv', 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f'# One training step at {args.crop}x{args.crop}, batch {args.batch}: memory', '',
             f'Command: `{args.command}`  ', f'Environment: {environment}.', '',
             '| ' + ' | '.join(FIELDS) + ' |', '|' + '---|' * len(FIELDS)]
    lines += ['| ' + ' | '.join(str(row.get(k, '')) for k in FIELDS) + ' |' for row in rows]
    with open(stem + '.md', 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main(argv=None) -> int:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import afno_seg  # noqa: F401  (registers backbones, mixers, the CPU optimizer wrapper)
    from afno_seg.engine.errors import check_device
    from afno_seg.experiments.benchmarking import environment
    args = parse_args(argv)
    check_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    init_default_scope('mmseg')
    MMLogger.get_current_instance().setLevel(logging.WARNING)
    env = f'{environment(args.device)}, {torch.get_num_threads()} threads'
    rows = []
    for path in args.configs:
        for precision in args.precisions:
            try:
                rows.append(measure(path, precision, args, device))
            except Exception as error:  # noqa: BLE001  (e.g. out of memory: record, go on)
                rows.append(dict(config=osp.basename(path), precision=precision, crop=args.crop,
                                 status=f'{type(error).__name__}: '
                                 f'{str(error).splitlines()[0][:160]}'))
            print(rows[-1], flush=True)
            write(rows, args, env)
            gc.collect()
            if device.type == 'cuda':
                torch.cuda.empty_cache()
    print(f'wrote {args.out}/step_memory{args.tag}.{{csv,md}}')
    return 0 if all(r['status'].startswith('ok') for r in rows) else 2


if __name__ == '__main__':
    from afno_seg.engine import run_tool
    sys.exit(run_tool(main))  # --device cuda without CUDA: one line
