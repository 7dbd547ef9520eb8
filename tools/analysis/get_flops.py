"""Cost of a segmentor per backbone stage and component, FFTs and attention counted.

Same flags as mmseg's ``tools/analysis_tools/get_flops.py`` (``config``, ``--shape``,
``--cfg-options``), plus ``--out`` (JSON + Markdown), ``--device``, ``--real-attention`` and
``--mixer SPEC`` (any SegFormer config, ``mmseg::segformer/...`` too, with other token mixers; see
``afno_seg/mixer_switch.py``).
Prints a Markdown table: per stage the patch embedding, the mixer split into FFT and the rest
(spectral MLP / filter / attention products / projections, with the op names), the Mix-FFN and the
norms; the decode head; the total; parameters of each; GMACs and GFLOPs (= 2 x GMACs); for mixers
with an analytic ``flops()``, the analytic GFLOPs beside the traced ones.

Example::

    python tools/analysis/get_flops.py configs/segformer_afno_b3_cityscapes.py \
        --shape 1024 1024 --out work_dirs/flops/afno_b3_1024

The whole model is traced once with ``torch.jit`` on random input, batch 1 (about a minute for
B3 at 1024 x 1024 on two CPU cores). Attention runs through a shape-only stand-in while tracing
(the count depends on shapes only; full self-attention at 65,536 tokens would otherwise take
minutes); ``--real-attention`` runs the real kernels.
"""
import argparse
import sys
from pathlib import Path

from mmengine import DictAction

from afno_seg.analysis.config_cost import analyze_config, image_shape

__all__ = ['analyze_config', 'main', 'parse_args']


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='FLOPs and parameters of a segmentor, per stage and component')
    parser.add_argument('config', help='config file path')
    parser.add_argument('--shape', type=int, nargs='+', default=[1024, 1024],
                        help='input size: H W, or one number for a square (default: 1024 1024)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value (as in mmseg\'s tools)')
    parser.add_argument('--out', help='write OUT.json and OUT.md (OUT may end in .json or .md)')
    parser.add_argument('--device', default='cpu', help='device to trace on (default: cpu)')
    parser.add_argument('--real-attention', action='store_true',
                        help='run the real attention kernels while tracing (same count, slower)')
    parser.add_argument('--mixer', metavar='SPEC',
                        help='MixerMiT with these mixers in place of the config\'s MiT backbone '
                        '(afno, afno+afno+esa+esa, afno:sparsity_threshold=0.1)')
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from afno_seg.analysis.report import breakdown_markdown, summarize, write_report
    from afno_seg.engine.errors import check_device
    args = parse_args(argv)
    check_device(args.device)
    shape = image_shape(args.shape)
    result = analyze_config(args.config, shape, args.cfg_options, args.device,
                            args.real_attention, args.mixer)
    result['summary'] = summarize(result)
    options = ' '.join(f'{k}={v}' for k, v in (args.cfg_options or {}).items())
    name = Path(args.config).name + (f' --mixer {args.mixer}' if args.mixer else '')
    title = f'{name} at {shape[0]}x{shape[1]}' + (
        f' ({options})' if options else '')
    markdown = breakdown_markdown(result, title)
    print(markdown)
    if args.out:
        for path in write_report(args.out, result, markdown):
            print(f'wrote {path}')
    else:
        print('results: the table above (--out PATH also writes PATH.json and PATH.md)')
    return result


if __name__ == '__main__':
    from afno_seg.engine import run_tool
    sys.exit(run_tool(main))  # a UserError (bad config, unknown mixer) is one line
