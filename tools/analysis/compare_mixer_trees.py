"""Forward+backward time of the spectral mixers of two source trees, side by side in one process.

    python tools/analysis/compare_mixer_trees.py OLD_TREE NEW_TREE [--rounds 15] [--threads 1]
        [--stage-points] [--forward] [--onnx OLD_DIR NEW_DIR]

For refactors that must not slow a mixer down: each tree's ``afno_seg/mixers`` is loaded as its
own package (registration stubbed out, so both load), and every round times each mixer once per
tree, alternating, at SegFormer-B3 stage points (fp32, batch 1). Prints the median of the
per-round ratios NEW / OLD (below 1: the new tree is faster). ``NAME-composed`` is the mixer's
plain formula: ``use_form('reference')`` of the tree's ``mixers/forms.py``, or ``fused=False`` in a
tree from before that switch.

``--forward`` times inference (forward under ``no_grad``) instead, and ``--onnx OLD_DIR NEW_DIR``
adds the matmul-form graphs each tree's ``tools/deployment/benchmark_onnx.py --stage-points
--runtimes ort-matmul --onnx-dir DIR`` kept, timed in onnxruntime in the same rounds: the
columns then say how the graph's time and its ratio to PyTorch moved (ORT / PyTorch new over
old), each a median of per-round ratios.
"""
import argparse
import contextlib
import importlib
import statistics
import sys
import time
import types
from functools import partial
from pathlib import Path

import torch

POINTS = [(2, 128, 128), (3, 320, 64)]  # (B3 stage, channels, square grid)
STAGE_POINTS = [(1, 64, 256), (2, 128, 128), (3, 320, 64), (4, 512, 32)]  # of a 1024 crop
MIXERS = {'afno': ('afno', 'AFNOMixer', {}), 'afno25': ('afno', 'AFNOMixer',
          {'hard_thresholding_fraction': 0.25}), 'afno-composed': ('afno', 'AFNOMixer', {}),
          'gfn': ('gfn', 'GlobalFilterMixer', {}), 'gfn-composed': ('gfn', 'GlobalFilterMixer', {}),
          'fnet': ('fnet', 'FNetMixer', {}), 'fno': ('fno', 'FNOMixer', {'modes': (16, 16)})}


def load_tree(root: Path, alias: str) -> str:
    """Register ``root/afno_seg/mixers`` as package ``alias.mixers`` without running the package
    ``__init__`` files; ``@register_model`` is a no-op there."""
    for name, path in [(alias, root / 'afno_seg'), (f'{alias}.mixers', root / 'afno_seg/mixers')]:
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    registry = types.ModuleType(f'{alias}.registry')
    registry.register_model = lambda cls: cls
    sys.modules[registry.__name__] = registry
    return f'{alias}.mixers'


def build(package: str, name: str, channels: int):
    """``(mixer, context it runs in)`` of ``name`` from one tree."""
    module, cls_name, kwargs = MIXERS[name]
    cls = getattr(importlib.import_module(f'{package}.{module}'), cls_name)
    composed = name.endswith('-composed')
    try:
        forms = importlib.import_module(f'{package}.forms')
    except ModuleNotFoundError:  # before the forms switch
        return cls(channels, **kwargs, **({'fused': False} if composed else {})), \
            contextlib.nullcontext
    return cls(channels, **kwargs), (partial(forms.use_form, 'reference') if composed
                                     else contextlib.nullcontext)


def step(mixer, x, hw, forward_only=False):
    mixer, context = mixer
    start = time.perf_counter()
    with context(), torch.set_grad_enabled(not forward_only):
        out = mixer(x, hw)
        if not forward_only:
            out.backward(torch.ones_like(x))
    return time.perf_counter() - start


def onnx_session(folder: Path, name: str, channels: int, grid: int, threads: int):
    """``run()`` of ``folder``'s graph of ``name`` at this point, or None where there is none."""
    import onnxruntime
    path = folder / f'mixer-{name}-{channels}@{grid}x{grid}-matmul.onnx'
    if not path.exists():
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    feed_name = session.get_inputs()[0].name
    return lambda x: session.run(None, {feed_name: x})


def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('old', type=Path)
    parser.add_argument('new', type=Path)
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--mixers', nargs='*', default=list(MIXERS))
    parser.add_argument('--stage-points', action='store_true',
                        help='all four B3 stage points of a 1024 crop (default: stages 2 and 3)')
    parser.add_argument('--forward', action='store_true', help='inference: forward, no grad')
    parser.add_argument('--onnx', nargs=2, type=Path, metavar=('OLD_DIR', 'NEW_DIR'),
                        help='also time these matmul-form graphs (implies --forward)')
    args = parser.parse_args()
    args.forward = args.forward or bool(args.onnx)
    torch.set_num_threads(args.threads)
    packages = [load_tree(args.old, 'tree_old'), load_tree(args.new, 'tree_new')]
    columns = ['PyTorch new / old'] + (['ORT new / old', '(ORT / PyTorch) new / old']
                                       if args.onnx else [])
    print(f'| mixer | stage | C | grid | {" | ".join(columns)} |')
    print('|---' * (4 + len(columns)) + '|')
    for stage, channels, grid in STAGE_POINTS if args.stage_points else POINTS:
        hw = (grid, grid)
        for name in args.mixers:
            if name == 'fno' and channels > 128:
                continue  # 400 MB of weights per layer at C = 320
            mixers = []
            for package in packages:
                torch.manual_seed(0)
                mixers.append(build(package, name, channels))
            x = torch.randn(1, grid * grid, channels, requires_grad=not args.forward)
            graphs = [onnx_session(folder, name, channels, grid, args.threads)
                      for folder in args.onnx or ()]
            if args.onnx and None in graphs:
                print(f'| {name} | {stage} | {channels} | {grid}x{grid} | no graph in both dirs |')
                continue
            calls = [partial(step, mixer, x, hw, args.forward) for mixer in mixers]
            calls += [partial(timed, graph, x.detach().numpy()) for graph in graphs]
            for call in calls:  # warm-up
                call()
            rounds = []
            for index in range(args.rounds):
                order = range(len(calls)) if index % 2 == 0 else reversed(range(len(calls)))
                times = {i: calls[i]() for i in order}
                ratios = [times[1] / times[0]]
                if graphs:
                    ratios += [times[3] / times[2], times[3] / times[1] / (times[2] / times[0])]
                rounds.append(ratios)
            medians = [statistics.median(column) for column in zip(*rounds)]
            print(f'| {name} | {stage} | {channels} | {grid}x{grid} | '
                  + ' | '.join(f'{m:.3f}' for m in medians) + ' |', flush=True)


if __name__ == '__main__':
    main()
