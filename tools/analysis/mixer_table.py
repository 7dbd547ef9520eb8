"""Paper-style cost table of the B3 Cityscapes configs, and the mixer complexity sweep.

Default: trace every ``configs/segformer_*_b3_cityscapes.py`` at 1024 x 1024 (or the given
``--configs``) with ``tools/analysis/get_flops.py``'s analysis and print one row per config:
mixer, parameters (M), total GFLOPs (and GMACs), mixer GFLOPs split into FFT and the rest, the
mixers' analytic GFLOPs, the decode head's share. Full self-attention is counted like the others
(its attention products through the shape-only stand-in; see ``afno_seg.analysis.flops``).

``--sweep`` instead prints the complexity table of every mixer at B3's stage-1 width (64 channels)
on 32 x 32 ... 512 x 512 grids, analytic next to traced, and ``--plot`` draws it (log-log PNG).

``--scaling`` prints the scaling table: mmseg's own SegFormer configs B0-B5 (ADE20K 512 x 512 and
Cityscapes 1024 x 1024, from the installed wheel) x every listed mixer (or the ``--mixer`` specs),
params, mixer GFLOPs and total GFLOPs each, beside the SegFormer paper's parameter counts;
``--plot`` draws total GFLOPs against params per mixer. Each (size, mixer) is traced with 1 and 2
layers per stage and extrapolated to its depth (``depth_scaled_cost``: exact, minutes for all).
``--mixer SPEC ...`` otherwise swaps the mixers of every ``--configs`` config (``afno_seg/
mixer_switch.py``).

Examples::

    python tools/analysis/mixer_table.py --out work_dirs/flops/mixer_table_b3_1024
    python tools/analysis/mixer_table.py --cfg-options model.decode_head.channels=256
    python tools/analysis/mixer_table.py --sweep --plot work_dirs/flops/mixer_complexity.png \
        --out work_dirs/flops/mixer_complexity
    python tools/analysis/mixer_table.py --scaling --plot work_dirs/flops/mixer_scaling.png \
        --out work_dirs/flops/mixer_scaling

(docs/flops.md's figures and docs/generated/ are copies of such outputs.)
"""
import argparse
import sys
from pathlib import Path

from mmengine import DictAction

from afno_seg.analysis.config_cost import analyze_config, image_shape
from afno_seg.mixers import mixer_variants

ROOT = Path(__file__).resolve().parents[2]


def default_configs() -> list[str]:
    """The B3 Cityscapes configs: one per catalogue variant in the catalogue's order, then the
    others (hybrids) by name."""
    found = sorted(ROOT.glob('configs/segformer_*_b3_cityscapes.py'))
    order = {f'segformer_{name}_b3_cityscapes': i for i, name in enumerate(mixer_variants())}
    return [str(p) for p in sorted(found, key=lambda p: (order.get(p.stem, len(order)), p.stem))]


def mixer_label(result: dict) -> str:
    """The mixer type, or the per-stage types joined by '/' for hybrids."""
    names = [next(iter(stage['mixers'])) if len(stage['mixers']) == 1 else
             '+'.join(stage['mixers']) for stage in result['stages'].values()]
    short = [name.replace('Mixer', '') for name in names]
    return short[0] if len(set(short)) == 1 else ' / '.join(short)


def table_markdown(results: list[dict]) -> str:
    from afno_seg.analysis.report import summarize
    lines = ['| config | mixer | params (M) | total GFLOPs (GMACs) | mixer GFLOPs | mixer FFT | '
             'mixer rest | mixer analytic | decode head GFLOPs | trace (s) |',
             '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    for result in results:
        s = summarize(result)
        name = Path(result['config']).stem.replace('segformer_', '').replace('_cityscapes', '')
        name += f' --mixer {result["mixer"]}' if result.get('mixer') else ''
        lines.append(
            f'| {name} | {mixer_label(result)} | {s["params_m"]:.1f} | '
            f'{s["total_gflops"]:.1f} ({s["total_gmacs"]:.1f}) | {s["mixer_gflops"]:.2f} | '
            f'{s["mixer_fft_gflops"]:.2f} | {s["mixer_rest_gflops"]:.2f} | '
            f'{s["mixer_analytic_gflops"]:.2f} | {s["head_gflops"]:.1f} | '
            f'{result["trace_seconds"]:.0f} |')
    return '\n'.join(lines) + '\n'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--configs', nargs='+', help='configs (default: all B3 Cityscapes ones)')
    parser.add_argument('--shape', type=int, nargs='+', default=[1024, 1024],
                        help='input size H W (default: 1024 1024)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings in every config, key=value')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--real-attention', action='store_true',
                        help='run real attention kernels while tracing (slow for full SA)')
    parser.add_argument('--sweep', action='store_true',
                        help='mixer complexity sweep at B3 stage-1 width instead of the configs')
    parser.add_argument('--sizes', type=int, nargs='+', default=[32, 64, 128, 256, 512],
                        help='--sweep grid sizes (square)')
    parser.add_argument('--channels', type=int, default=64, help='--sweep width (default 64)')
    parser.add_argument('--analytic-only', action='store_true', help='--sweep without tracing')
    parser.add_argument('--plot', help='--sweep: write a log-log PNG here')
    parser.add_argument('--scaling', action='store_true',
                        help="B0-B5 x mixers on mmseg's ADE20K 512 and Cityscapes 1024 configs")
    parser.add_argument('--mixer', nargs='+', metavar='SPEC',
                        help='mixer specs: every --configs config with each (--scaling: the '
                        'mixers of the table; default every listed one)')
    parser.add_argument('--out', help='write OUT.json and OUT.md')
    return parser.parse_args(argv)


def run_sweep(args) -> tuple[dict, str]:
    from afno_seg.analysis.complexity import mixer_sweep, plot_sweep, sweep_markdown
    records = mixer_sweep(args.sizes, args.channels, count=not args.analytic_only)
    markdown = sweep_markdown(records)
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_sweep(records, args.plot, args.channels)
    return dict(channels=args.channels, records=records), markdown


def run_configs(args) -> tuple[dict, str]:
    shape = image_shape(args.shape)
    results = []
    for config in args.configs or default_configs():
        for spec in args.mixer or [None]:
            print(f'tracing {config}{" --mixer " + spec if spec else ""} at {shape[0]}x{shape[1]}'
                  ' ...', file=sys.stderr, flush=True)
            results.append(analyze_config(config, shape, args.cfg_options, args.device,
                                          args.real_attention, spec))
    options = ' '.join(f'{k}={v}' for k, v in (args.cfg_options or {}).items())
    title = f'B3 Cityscapes configs at {shape[0]}x{shape[1]}, batch 1' + (
        f', {options}' if options else '')
    return dict(shape=list(shape), results=results), f'### {title}\n\n' + table_markdown(results)


def main(argv=None) -> dict:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from afno_seg.analysis.report import write_report
    from afno_seg.engine.errors import check_device
    args = parse_args(argv)
    check_device(args.device)
    if args.scaling:
        from afno_seg.analysis.scaling import run_scaling
        payload, markdown = run_scaling(args.mixer or list(mixer_variants()), args.plot,
                                        args.cfg_options)
    else:
        payload, markdown = run_sweep(args) if args.sweep else run_configs(args)
    print(markdown)
    if args.out:
        for path in write_report(args.out, payload, markdown):
            print(f'wrote {path}')
    if args.plot and (args.sweep or args.scaling):
        print(f'wrote {args.plot}')
    return payload


if __name__ == '__main__':
    from afno_seg.engine import run_tool
    sys.exit(run_tool(main))  # --device cuda without CUDA, an unknown mixer: one line
