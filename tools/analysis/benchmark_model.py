"""Training-step time and memory, and inference throughput, of whole SegFormer-B3 segmentors.

For each config (default: every ``configs/segformer_*_b3_cityscapes.py``) the full segmentor is
built with random weights (no pretrained file, no dataset; SyncBN replaced by BN for one
process) and its config's optimizer (AdamW with the paramwise settings). All models are built
first and then stepped in turns, one training step of each per round, so that every config sees
the same machine load; likewise for inference. Recorded per config:

* ``train_s``: seconds of ``model.train_step`` (data preprocessing, forward, loss, backward,
  optimizer step) on ``--batch`` random images and labels at ``--crop``, median [min-max] over
  the rounds after ``--warmup``;
* ``step_peak_mb``: peak memory of one step beyond what was allocated before it (activations,
  gradients, temporaries; on CPU from the profiler's allocation events, on CUDA from
  ``max_memory_allocated``), and ``state_mb``: parameters plus optimizer state (held between
  steps);
* ``infer_img_s``: images per second of ``model(inputs, mode='tensor')`` in eval mode without
  gradients (the decode head's logits at 1/4 resolution; no resize, no sliding window).

GlobalFilterMixer stores its filters at the backbone's ``base_img_size`` grids; it is set to the
crop here, as when training at that crop. ``--precision`` as in tools/train.py: ``fp32``
(``OptimWrapper``), ``fp16`` (float16 autocast, dynamic loss scale; on a CPU through
``CPUAutocastOptimWrapper``), ``bf16``, ``auto`` (the processor's fast one on a CPU); the same
autocast at inference. Default: fp32 on CPU, the config's fp16 on CUDA.

Usage::

    python tools/analysis/benchmark_model.py --crop 512                 # CPU, all B3 configs
    python tools/analysis/benchmark_model.py --device cuda --crop 1024  # GPU, fp16
    python tools/analysis/benchmark_model.py --quick --out /tmp/b       # seconds: B0-sized, 64 px
    python tools/analysis/benchmark_model.py --configs \
        mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py --mixer afno  # any SegFormer
    python tools/analysis/benchmark_model.py --configs configs/segformer_afno_b3_cityscapes.py \
        --heads stock low-res  # mmseg's decode head against LowResFusionSegformerHead
"""
import argparse
import glob
import itertools
import logging
import os
import os.path as osp
import statistics
import sys
import time

import torch

from afno_seg.analysis.memory import peak_bytes
from afno_seg.decode_heads import HEADS
from afno_seg.experiments.benchmarking import (
    environment,
    error_text,
    load_average,
    prepare_run,
    write_csv,
)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

FIELDS = ['config', 'mixers', 'device', 'precision', 'crop', 'batch', 'params_m', 'status',
          'train_s', 'train_min_s', 'train_max_s', 'train_times_s', 'step_peak_mb', 'state_mb',
          'infer_img_s', 'infer_times_s']


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--configs', nargs='+', help='config files (default: every '
                        'configs/segformer_*_b3_cityscapes.py)')
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--precision', nargs='+', choices=['auto', 'fp16', 'bf16', 'fp32'],
                        help='default: fp32 on CPU, fp16 on CUDA; several: each config in each, '
                        'interleaved (rows CONFIG@PRECISION, step ratios to the first)')
    parser.add_argument('--crop', type=int, default=512, help='square crop size')
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--iters', type=int, default=3, help='timed training rounds')
    parser.add_argument('--warmup', type=int, default=1, help='untimed training rounds first')
    parser.add_argument('--infer-iters', type=int, default=3, help='timed inference rounds '
                        '(after one untimed); 0 skips inference')
    parser.add_argument('--no-memory', action='store_true')
    parser.add_argument('--quick', action='store_true', help='smoke test: arch b0 with a '
                        '32-channel head, 64 px crop, batch 1, 1 round, no warm-up')
    parser.add_argument('--mixer', metavar='SPEC', help='every config\'s MiT backbone as MixerMiT '
                        'with these mixers (afno, afno+afno+esa+esa, afno:sparsity_threshold=0.1)')
    parser.add_argument('--heads', nargs='+', choices=HEADS, default=['stock'],
                        help='decode head: the config\'s (stock) and/or, in place of a '
                        'SegformerHead, LowResFusionSegformerHead (low-res; row '
                        'CONFIG+low-res-head)')
    parser.add_argument('--threads', type=int, default=1, help='torch CPU threads')
    parser.add_argument('--cpu-memory', choices=['cache', 'default'], default='cache',
                        help="'cache': keep freed memory in the heap as tools/train.py does on a "
                        "CPU (afno_seg.engine.cpu_memory); 'default': glibc's mmap per large "
                        "tensor")
    parser.add_argument('--out', default=osp.join(ROOT, 'docs', 'benchmarks'))
    parser.add_argument('--tag', default='', help='suffix of the output file names')
    args = parser.parse_args(argv)
    args.command = ' '.join(['python', osp.relpath(__file__, ROOT),
                             *(sys.argv[1:] if argv is None else argv)])
    if args.mixer:
        from afno_seg.engine import UserError
        from afno_seg.mixer_switch import parse_mixer_spec
        try:
            parse_mixer_spec(args.mixer)
        except UserError as error:
            parser.error(str(error))
    args.configs = args.configs or sorted(
        glob.glob(osp.join(ROOT, 'configs', 'segformer_*_b3_cityscapes.py')))
    args.precision = args.precision or ['fp32' if args.device == 'cpu' else 'fp16']
    if args.quick:
        args.crop, args.batch, args.iters, args.warmup = 64, 1, 1, 0
        args.infer_iters = min(args.infer_iters, 1)
    return args


def prepare_cfg(path: str, args: argparse.Namespace, head: str = 'stock',
                precision: str = 'fp32'):
    from afno_seg.decode_heads import use_low_res_fusion
    from afno_seg.engine import UserError, load_config
    cfg = load_config(path, mixer=args.mixer, pretrained=False)  # a path or mmseg::segformer/...
    if head == 'low-res' and not use_low_res_fusion(cfg.model):
        raise UserError(f'--heads low-res: {path} has no SegformerHead to switch')
    backbone = cfg.model.backbone
    backbone.init_cfg = None  # random weights: no pretrained file needed
    if 'base_img_size' in backbone:
        backbone.base_img_size = args.crop
    cfg.model.data_preprocessor.size = (args.crop, args.crop)
    if args.quick:
        from afno_seg.backbones.mixer_mit import ARCH_SETTINGS
        backbone.arch = 'b0'
        for key in ('embed_dims', 'num_layers', 'num_heads'):  # MiT configs spell sizes out
            backbone.pop(key, None)
        sizes = ARCH_SETTINGS['b0']
        cfg.model.decode_head.in_channels = [sizes['embed_dims'] * h for h in sizes['num_heads']]
        cfg.model.decode_head.channels = 32
    from afno_seg.engine.precision import apply_precision
    return cfg, apply_precision(cfg, precision, cuda=args.device == 'cuda')


class Entry:
    """One config's model, optimizer wrapper and measurements."""

    def __init__(self, path: str, args: argparse.Namespace, device: torch.device,
                 head: str = 'stock', precision: str = 'fp32') -> None:
        from mmengine.model import revert_sync_batchnorm
        from mmengine.optim import build_optim_wrapper
        from mmseg.registry import MODELS
        self.cfg, self.precision = prepare_cfg(path, args, head, precision)
        mixers = self.cfg.model.backbone.mixers
        mixers = [mixers] if isinstance(mixers, dict) else mixers
        self.row = dict(config=row_name(path, head, precision, args), device=args.device,
                        precision=self.precision,
                        crop=args.crop, batch=args.batch, status='ok',
                        mixers='/'.join(m['type'].replace('Mixer', '') for m in mixers))
        self.model = revert_sync_batchnorm(MODELS.build(self.cfg.model))
        self.model.init_weights()
        self.model = self.model.to(device).train()
        self.row['params_m'] = sum(p.numel() for p in self.model.parameters()) / 1e6
        self.optim_wrapper = build_optim_wrapper(self.model, self.cfg.optim_wrapper)
        self.generator = torch.Generator().manual_seed(0)
        self.train_times, self.infer_times, self.peak = [], [], 0.0

    def batch(self, args) -> dict:
        from afno_seg.analysis.memory import random_batch
        return random_batch(args.crop, self.cfg.model.decode_head.num_classes, self.generator,
                            args.batch)

    def train_step(self, data) -> None:
        self.model.train()
        self.model.train_step(data, self.optim_wrapper)

    def state_bytes(self) -> float:
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for state in self.optim_wrapper.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return float(sum(t.numel() * t.element_size() for t in tensors))


def timed(fn, device: torch.device) -> float:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def inference_inputs(entry: Entry, args, device: torch.device) -> torch.Tensor:
    data = entry.model.data_preprocessor(entry.batch(args), False)
    return data['inputs'].to(device)


def row_name(path: str, head: str, precision: str, args) -> str:
    return (osp.basename(path) + ('+low-res-head' if head == 'low-res' else '') +
            (f'@{precision}' if len(args.precision) > 1 else ''))


def run(args: argparse.Namespace, device: torch.device, entries: list, failed: list) -> None:
    """Build every model, then train and infer in rounds; fills ``entries`` and ``failed``."""
    for path, head, precision in itertools.product(args.configs, args.heads, args.precision):
        try:
            entries.append(Entry(path, args, device, head, precision))
        except Exception as error:  # noqa: BLE001  (record it, go on with the next config)
            failed.append(dict(config=row_name(path, head, precision, args),
                               status=error_text(error)))
    print(f'built {len(entries)} models', flush=True)
    live = list(entries)
    for round_index in range(args.warmup + args.iters):
        for entry in (live if round_index % 2 == 0 else live[::-1]):
            data = entry.batch(args)
            try:
                seconds = timed(lambda: entry.train_step(data), device)
            except Exception as error:  # noqa: BLE001  (e.g. out of memory)
                entry.row['status'] = error_text(error)
                live.remove(entry)
                continue
            if round_index >= args.warmup:
                entry.train_times.append(seconds)
            print(f"  train round {round_index} {entry.row['config']}: {seconds:.3f} s",
                  flush=True)
    if not args.no_memory:
        for entry in live:
            data = entry.batch(args)
            entry.peak = peak_bytes(lambda: entry.train_step(data), device)
    if args.infer_iters:
        measure_inference([e for e in live], args, device)


def measure_inference(entries: list[Entry], args, device: torch.device) -> None:
    inputs = {id(e): inference_inputs(e, args, device) for e in entries}
    for entry in entries:
        entry.model.eval()
        entry.optim_wrapper.zero_grad()  # free gradients before inference
    for round_index in range(1 + args.infer_iters):
        for entry in (entries if round_index % 2 == 0 else entries[::-1]):
            def forward(entry=entry):
                with torch.no_grad(), torch.autocast(
                        device.type, dtype=torch.float16 if entry.precision == 'fp16' else
                        torch.bfloat16, enabled=entry.precision != 'fp32'):
                    entry.model(inputs[id(entry)], mode='tensor')
            try:
                seconds = timed(forward, device)
            except Exception as error:  # noqa: BLE001
                entry.row['status'] = error_text(error)
                continue
            if round_index:
                entry.infer_times.append(seconds)


def finish_row(entry: Entry, args) -> dict:
    row = dict(entry.row)
    if entry.train_times:
        row.update(train_s=statistics.median(entry.train_times), train_min_s=min(entry.train_times),
                   train_max_s=max(entry.train_times),
                   train_times_s=';'.join(f'{t:.4f}' for t in entry.train_times))
    if not args.no_memory:
        row.update(step_peak_mb=entry.peak / 2**20, state_mb=entry.state_bytes() / 2**20)
    if entry.infer_times:
        row.update(infer_img_s=args.batch / statistics.median(entry.infer_times),
                   infer_times_s=';'.join(f'{t:.4f}' for t in entry.infer_times))
    return row


def paired_train_ratios(entries: list[Entry], reference: str) -> dict[str, tuple]:
    """Per config: median [min, max] over rounds of (its step time / the reference's)."""
    ref = next((e for e in entries if e.row['config'] == reference and e.train_times), None)
    if ref is None:
        return {}
    out = {}
    for entry in entries:
        if entry.train_times and len(entry.train_times) == len(ref.train_times):
            ratios = [a / b for a, b in zip(entry.train_times, ref.train_times)]
            out[entry.row['config']] = (statistics.median(ratios), min(ratios), max(ratios))
    return out


def _number(value, digits: int) -> str:
    """``value`` with ``digits`` decimals; blank when not measured (``--no-memory``, no infer)."""
    return '' if value is None or value != value else f'{value:.{digits}f}'


def write_outputs(rows, ratios, args, started, load_before, load_after) -> list[str]:
    os.makedirs(args.out, exist_ok=True)
    stem = osp.join(args.out, f'models_{args.device}{args.tag}')
    write_csv(stem + '.csv', rows, FIELDS)
    lines = [f'# SegFormer segmentors: training step and inference, {args.device}', '',
             f'Command: `{args.command}`', '',
             f'Environment: {environment(args.device)}; torch threads {torch.get_num_threads()}; '
             f'CPU memory {args.cpu_memory}; '
             f'crop {args.crop}x{args.crop}, batch {args.batch}, '
             f'precision {"/".join(args.precision)}; training: {args.warmup} warm-up + '
             f'{args.iters} timed rounds, inference: 1 + '
             f'{args.infer_iters}, configs interleaved; started {started}; load average '
             f'{load_before} at start, {load_after} at end.', '',
             '| config | mixers | params M | train step s (median [min-max]) | step / '
             f'{"ESA" if len(args.precision) == 1 else args.reference} step '
             '| step peak MB | state MB | inference img/s | status |',
             '|---|---|---|---|---|---|---|---|---|']
    for row in rows:
        ratio = ratios.get(row['config'])
        train = (f"{row['train_s']:.3f} [{row['train_min_s']:.3f}-{row['train_max_s']:.3f}]"
                 if 'train_s' in row else '')
        lines.append(
            f"| {row['config']} | {row.get('mixers', '')} | "
            f"{_number(row.get('params_m'), 1)} | {train} | "
            f"{'' if ratio is None else f'{ratio[0]:.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}]'} | "
            f"{_number(row.get('step_peak_mb'), 0)} | {_number(row.get('state_mb'), 0)}"
            f" | {_number(row.get('infer_img_s'), 2)} | {row['status']} |")
    with open(stem + '.md', 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))
    return [stem + '.csv', stem + '.md']


def main(argv=None) -> int:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import afno_seg  # noqa: F401  (registers backbones and mixers)
    args = parse_args(argv)
    prepare_run(args)
    device = torch.device(args.device)
    if device.type == 'cuda':
        torch.backends.cudnn.benchmark = True  # fixed input size, as the configs' env_cfg
    init_default_scope('mmseg')
    MMLogger.get_current_instance().setLevel(logging.WARNING)
    logging.getLogger('mmengine').setLevel(logging.WARNING)
    started, load_before = time.strftime('%Y-%m-%d %H:%M:%S %Z'), load_average()
    entries, failed, interrupted = [], [], False
    try:
        run(args, device, entries, failed)
    except KeyboardInterrupt:  # e.g. a time limit: write what was measured
        interrupted = True
        args.command += '  (INTERRUPTED: partial results)'
        print('interrupted: writing what was measured so far', flush=True)
    rows = [finish_row(e, args) for e in entries] + failed
    args.reference = ('segformer_esa_b3_cityscapes.py' if len(args.precision) == 1 else
                      row_name(args.configs[0], args.heads[0], args.precision[0], args))
    ratios = paired_train_ratios(entries, args.reference)
    written = write_outputs(rows, ratios, args, started, load_before, load_average())
    print('wrote ' + ', '.join(written))
    if interrupted:
        return 3
    return 0 if all(r['status'] == 'ok' for r in rows) else 2


if __name__ == '__main__':
    from afno_seg.engine import run_tool
    sys.exit(run_tool(main))  # --device cuda without CUDA: one line
