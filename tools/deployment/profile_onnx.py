"""Where an ONNX file spends its time in onnxruntime: kernel time by operator type and by node.

    python tools/deployment/profile_onnx.py FILE.onnx [--runs 3] [--threads 1] [--top 20]
        [--input-shape 1 3 512 1024] [--out profile.md]

Random inputs; one warm-up run, then ``--runs`` profiled runs averaged (onnxruntime's own
profiler). ``--input-shape`` gives the input's sizes where the graph has symbolic ones (a
``--dynamic`` export). Files to profile: ``pytorch2onnx.py --out``, or the graphs that
``benchmark_onnx.py --onnx-dir DIR`` timed. Prints a markdown table; ``--out`` also writes it.
"""
import argparse
import sys
from collections import Counter

import numpy as np

from afno_seg.deployment.benchmark import OnnxProfile, profile_onnx
from afno_seg.engine import run_tool


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Profile an ONNX file in onnxruntime')
    parser.add_argument('onnx', help='the .onnx file')
    parser.add_argument('--runs', type=int, default=3, help='profiled runs after a warm-up')
    parser.add_argument('--threads', type=int, default=1, help="onnxruntime's intra-op threads")
    parser.add_argument('--top', type=int, default=20, help='nodes listed, slowest first')
    parser.add_argument('--input-shape', type=int, nargs='+', metavar='SIZE',
                        help='input sizes where the graph has symbolic ones')
    parser.add_argument('--out', help='also write the table to this markdown file')
    return parser.parse_args(argv)


def table(profile: OnnxProfile, top: int = 20) -> str:
    """Markdown: a header line, the operator types, then the ``top`` nodes."""
    total = profile.kernel_ms or 1.0
    lines = [f'`{profile.path}`: {profile.threads} thread(s), mean of {len(profile.run_ms)} runs '
             f'after a warm-up; wall {np.mean(profile.run_ms):.1f} ms a run, kernel time '
             f'{profile.kernel_ms:.1f} ms a run', '',
             '| op | ms a run | share | nodes |', '|---|---|---|---|']
    counts = Counter(node.op for node in profile.nodes)
    lines += [f'| {op} | {ms:.2f} | {ms / total:.1%} | {counts[op]} |'
              for op, ms in profile.ops.items()]
    lines += ['', f'| node (top {top}) | op | ms a run | share | input shapes |',
              '|---|---|---|---|---|']
    lines += [f'| {n.name} | {n.op} | {n.ms:.2f} | {n.ms / total:.1%} | {n.inputs} |'
              for n in profile.nodes[:top]]
    return '\n'.join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    text = table(profile_onnx(args.onnx, runs=args.runs, threads=args.threads,
                              input_shape=args.input_shape), args.top)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')


if __name__ == '__main__':
    sys.exit(run_tool(main))
