"""Forward+backward time of the spectral mixers of two source trees, side by side in one process.

    python tools/analysis/compare_mixer_trees.py OLD_TREE NEW_TREE [--rounds 15] [--threads 1]

For refactors that must not slow a mixer down: each tree's ``afno_seg/mixers`` is loaded as its
own package (registration stubbed out, so both load), and every round times each mixer once per
tree, alternating, at SegFormer-B3 stage points (fp32, batch 1). Prints the median of the
per-round ratios NEW / OLD (below 1: the new tree is faster). ``NAME-composed`` is the mixer's
plain formula: ``use_form('reference')`` of the tree's ``mixers/forms.py``, or ``fused=False`` in a
tree from before that switch.
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


def step(mixer, x, hw):
    mixer, context = mixer
    start = time.perf_counter()
    with context():
        mixer(x, hw).backward(torch.ones_like(x))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('old', type=Path)
    parser.add_argument('new', type=Path)
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--mixers', nargs='*', default=list(MIXERS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    packages = [load_tree(args.old, 'tree_old'), load_tree(args.new, 'tree_new')]
    print('| mixer | stage | C | grid | new / old (median of paired rounds) |')
    print('|---|---|---|---|---|')
    for stage, channels, grid in POINTS:
        hw = (grid, grid)
        for name in args.mixers:
            if name == 'fno' and channels > 128:
                continue  # 400 MB of weights per layer at C = 320
            mixers = []
            for package in packages:
                torch.manual_seed(0)
                mixers.append(build(package, name, channels))
            x = torch.randn(1, grid * grid, channels, requires_grad=True)
            for mixer in mixers:  # warm-up
                step(mixer, x, hw)
            ratios = []
            for index in range(args.rounds):
                order = [0, 1] if index % 2 == 0 else [1, 0]
                times = dict((i, step(mixers[i], x, hw)) for i in order)
                ratios.append(times[1] / times[0])
            print(f'| {name} | {stage} | {channels} | {grid}x{grid} | '
                  f'{statistics.median(ratios):.3f} |', flush=True)


if __name__ == '__main__':
    main()
