"""The AFNO paper's Table 4 as one command: train, evaluate and cost every mixer, one table.

For each config (default: every ``configs/segformer_*_b3_cityscapes.py``), or each config with its
backbone mixers replaced by each ``--mixers`` spec, and each seed: train (as ``tools/train.py``;
torchrun as ``tools/dist_train.sh`` with ``--gpus N``), evaluate the final checkpoint on val
(as ``tools/test.py``, at each ``--eval-scales`` factor of the test resolution), then measure
params and mixer / total GFLOPs (as ``tools/analysis/get_flops.py``) and training-step time,
memory and inference speed of all rows in one interleaved run (``benchmark_model.py``). Every step
is a process of its own (``python -m afno_seg.experiments.study_jobs``, the library's steps).
Writes ``WORK_DIR/study.md`` (the table: mIoU mean ± std over seeds, costs, ratios to ESA),
``study.csv`` (also per-seed and per-class IoU) and plots (mIoU vs mixer GFLOPs, vs step time,
resolution transfer, AFNO sparsity sweep).

Resumable: a run with a metrics JSON for every scale is skipped, an interrupted training resumes
from its last checkpoint (``--resume``), costs already measured are kept. Run the same command
again after a kill. ``--no-train`` evaluates only what is trained (beside a running study, or
after ``--print-slurm`` jobs), ``--costs-only`` measures costs alone, ``--table-only`` rewrites
the table from what is there. With ``--spectrum``, the analysis of ``tools/analysis/spectrum.py``
runs on the first seed of every row (``--spectrum-images`` test images), which adds AFNO's
measured soft-shrink sparsity to the table and, when rows differ in ``sparsity_threshold``, the
sparsity-sweep plot.

Seed noise: each row's headline mIoU minus ESA's at the same seed number, with a 95% paired t
interval and a verdict ("above ESA", "below ESA", "within seed noise") in the table. A row without
runs in this study may take its per-seed mIoU from an earlier ``study.csv`` (``--earlier-csv``).

Transplant (``--transplant-from SOURCE``): every training starts from one trained model with each
row's mixers put in its place (``load_from``; the mixers' tensors the checkpoint lacks start as
initialised), the same short fine-tune (``--cfg-options``) for every row; ESA fine-tuned alike is
the control. SOURCE is a checkpoint (on a GPU: a published SegFormer converted by
``tools/model_converters/segformer2afno_seg.py``, with its ``configs/published/`` config) or a
mixer spec: the config with those mixers is trained first (``WORK_DIR/source/``, at
``--source-seed``, default the first seed, ``--source-cfg-options`` added to ``--cfg-options``:
its longer schedule), once, resumable too.

Mixer specs (``--mixers``): catalogue names (``afno``, ``gfn``, ... or ``all``), one name per
stage joined by ``+`` (``afno+afno+esa+esa``: the hybrid), settings after ``:``
(``afno:sparsity_threshold=0.1``); ``--mixer`` is the same option, as in the other tools. Configs
may be any SegFormer config, by path or as ``mmseg::segformer/...py``: one whose backbone is mmseg's
MixVisionTransformer is first written as the equivalent MixerMiT config
(``WORK_DIR/configs/base/<name>.py``, efficient self-attention, ``afno_seg/mixer_switch.py``), which
the rows then inherit.

Examples::

    # the paper's experiment, 8 GPUs per run, 2 seeds
    python tools/analysis/mixer_study.py --work-dir work_dirs/study_b3 --gpus 8 --seeds 0 1 \
        --bench-args "--device cuda --crop 1024"
    python tools/analysis/mixer_study.py --work-dir work_dirs/study_b3 --gpus 8 --print-slurm
    # demo scale: every catalogue mixer in the demo model, costs at B3 size
    python tools/analysis/mixer_study.py configs/demo/segformer_afno_demo.py --mixers all \
        afno+afno+esa+esa --seeds 0 1 --work-dir work_dirs/study_demo \
        --cfg-options train_cfg.max_iters=200 param_scheduler.1.end=200 \
        --eval-scales 1 0.5 2 --cost-config configs/segformer_esa_b3_cityscapes.py
    # transplant at demo scale: ESA trained 160 iterations, every row fine-tuned 40 from it
    python tools/analysis/mixer_study.py configs/demo/segformer_afno_demo.py --mixers all \
        --seeds 0 1 --work-dir work_dirs/transplant_demo --transplant-from esa --no-costs \
        --cfg-options train_cfg.max_iters=40 param_scheduler.1.end=40 \
        --source-cfg-options train_cfg.max_iters=160 param_scheduler.1.end=160
    # transplant into the published SegFormer-B3 (converted), its 16k fine-tune, 8 GPUs per run
    python tools/analysis/mixer_study.py \
        configs/published/segformer_afno_b3_cityscapes_from_segformer.py --mixers all \
        --seeds 0 1 --work-dir work_dirs/transplant_b3 --gpus 8 \
        --transplant-from data/pretrained/segformer-b3-cityscapes.pth
"""
import argparse
import json
import shlex
import sys
from pathlib import Path

from afno_seg.engine import UserError, run_tool

ROOT = Path(__file__).resolve().parents[2]
# the step-time benchmark is a tool (its measuring code lives there), run beside this one
BENCHMARK_MODEL = Path(__file__).resolve().with_name('benchmark_model.py')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('configs', nargs='*', help='configs (default: every '
                        'configs/segformer_*_b3_cityscapes.py)')
    parser.add_argument('--work-dir', required=True, help='study directory (runs, logs, table)')
    parser.add_argument('--mixers', '--mixer', nargs='+', help="mixer specs swapped into each "
                        "config ('all' = every catalogue mixer)")
    parser.add_argument('--seeds', type=int, nargs='+', default=[0])
    parser.add_argument('--gpus', type=int, default=1, help='GPUs per training run (torchrun '
                        'above 1)')
    parser.add_argument('--print-slurm', action='store_true', help='print the slurm_train.sh '
                        'commands of the runs and exit')
    parser.add_argument('--partition', default='PARTITION', help='Slurm partition for '
                        '--print-slurm')
    parser.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                        help='passed to every training and evaluation')
    parser.add_argument('--eval-scales', type=float, nargs='+', default=[1.0],
                        help='evaluate at these factors of the test resize scale; the first one '
                        'is the headline column (default: 1)')
    parser.add_argument('--cost-config', help='measure costs on this config with each row\'s '
                                              'mixers (e.g. a B3 config for demo-scale runs)')
    parser.add_argument('--cost-shape', type=int, nargs='+', help='get_flops.py --shape '
                        '(default: its 1024 1024)')
    parser.add_argument('--bench-args', default='', help='extra benchmark_model.py arguments, '
                        'one string (e.g. "--crop 512 --batch 1 --iters 2")')
    parser.add_argument('--bench-max-params', type=float, metavar='M', help='benchmark only '
                        'models with at most M million parameters (FLOPs are counted for all)')
    parser.add_argument('--no-costs', action='store_true', help='skip FLOPs and benchmark')
    parser.add_argument('--costs-only', action='store_true', help='measure costs (and run '
                        '--spectrum) without training or evaluating')
    parser.add_argument('--no-benchmark', action='store_true', help='skip the benchmark only')
    parser.add_argument('--spectrum', action='store_true', help='analyse the spectrum '
                        '(tools/analysis/spectrum.py) of the first seed of every row (AFNO '
                        'sparsity column, sweep plot)')
    parser.add_argument('--spectrum-images', type=int, default=4, metavar='N',
                        help='--spectrum: on the first N test images (default: 4)')
    parser.add_argument('--no-train', action='store_true', help='evaluate only runs whose '
                        'training is finished; train nothing')
    parser.add_argument('--table-only', action='store_true', help='write the table from what is '
                        'there, run nothing')
    parser.add_argument('--transplant-from', metavar='SOURCE', help='start every training from '
                        'this checkpoint, or from the config with the mixers of this spec trained '
                        'first (the transplant study)')
    parser.add_argument('--source-seed', type=int, metavar='S', help='seed of a --transplant-from '
                        'spec\'s training (default: the first of --seeds; give it when a later '
                        'invocation adds seeds)')
    parser.add_argument('--source-cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                        help='added to --cfg-options for the training of a --transplant-from spec')
    parser.add_argument('--earlier-csv', metavar='CSV', help='study.csv of an earlier run of the '
                        'same command: per-seed mIoU of rows that have no runs here (marked)')
    args = parser.parse_args(argv)
    for option in args.cfg_options + args.source_cfg_options:
        if '=' not in option:
            parser.error(f'--cfg-options takes KEY=VALUE, got {option!r}')
    return args


def study_config(config: str, work_dir: Path) -> str:
    """``config`` as the study uses it: ``mmseg::`` resolved; an mmseg MiT backbone written
    once as the equivalent MixerMiT config (``work_dir/configs/base/<name>.py``), so that rows
    can swap its mixers."""
    from mmengine.config import Config

    from afno_seg.experiments.study_plan import write_once
    from afno_seg.mixer_switch import resolve_config_path, switch_mixer
    path = resolve_config_path(config)
    if not Path(path).is_file():
        return path  # plan_rows names it
    cfg = Config.fromfile(path)
    if cfg.get('model', {}).get('backbone', {}).get('type') != 'MixVisionTransformer':
        return path
    base = work_dir / 'configs' / 'base' / Path(path).name
    write_once(base, switch_mixer(cfg, 'esa').pretty_text)
    return str(base)


def transplant_source(args, configs: list[str], options):
    """The source Run of ``--transplant-from SPEC`` (None for a checkpoint, which becomes
    ``options.load_from``)."""
    from afno_seg.experiments.study_plan import plan_source
    source = args.transplant_from
    if not source:
        return None
    if Path(source).suffix in ('.pth', '.safetensors') or Path(source).is_file():
        if not Path(source).is_file():
            raise UserError(f'--transplant-from {source}: no such checkpoint; give an existing '
                            'file or a mixer spec (e.g. esa) to train the source first')
        options.load_from = str(Path(source).resolve())
        return None
    if len(configs) != 1:
        raise UserError(f'--transplant-from {source}: a source spec needs exactly one config, '
                        f'got {len(configs)}')
    seed = args.seeds[0] if args.source_seed is None else args.source_seed
    return plan_source(configs[0], source, options.work_dir, seed)


def benchmark(rows, options, bench_args: str) -> None:
    """One ``benchmark_model.py`` run over the rows not yet measured together."""
    from afno_seg.experiments.study import cost_files, pending_benchmark, run_logged
    configs = pending_benchmark(rows, options)
    if not configs:
        return
    done = cost_files(options)['bench_done']
    print(f'  benchmark of {len(configs)} models (interleaved)', flush=True)
    run_logged([sys.executable, str(BENCHMARK_MODEL), '--configs', *configs, '--out',
                str(done.parent), *shlex.split(bench_args)],
               options.work_dir / 'logs' / 'benchmark.log', '  ')
    done.write_text(json.dumps(configs))


def main(argv=None) -> None:
    from afno_seg.deployment.startup import quiet_known_warnings
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    from afno_seg.experiments.study import (
        StudyOptions,
        max_iters_of,
        run_study,
        slurm_commands,
        source_options,
    )
    from afno_seg.experiments.study_plan import plan_rows, plan_runs
    from afno_seg.experiments.study_table import write_study_outputs
    from afno_seg.mixers import mixer_variants
    args = parse_args(argv)
    configs = args.configs or sorted(str(p) for p in ROOT.glob('configs/segformer_*_b3_'
                                                                 'cityscapes.py'))
    specs = args.mixers
    if specs and 'all' in specs:
        at = specs.index('all')
        specs = specs[:at] + sorted(mixer_variants()) + specs[at + 1:]
    options = StudyOptions(
        args.work_dir, args.seeds, args.gpus, args.cfg_options, args.eval_scales,
        args.cost_config, args.cost_shape, costs=not args.no_costs,
        benchmark=not args.no_benchmark, spectrum=args.spectrum,
        spectrum_images=args.spectrum_images, partition=args.partition,
        runs=not args.costs_only, bench_max_params_m=args.bench_max_params,
        train=not args.no_train, source_cfg_options=args.source_cfg_options,
        earlier_csv=args.earlier_csv)
    options.work_dir.mkdir(parents=True, exist_ok=True)
    configs = [study_config(config, options.work_dir) for config in configs]
    rows = plan_rows(configs, specs, options.work_dir, args.cost_config)
    runs = plan_runs(rows, args.seeds, options.work_dir)
    source = transplant_source(args, configs, options)
    if args.print_slurm:
        if source is not None:  # first the source, then the rows from its final checkpoint
            own = source_options(options)
            print(slurm_commands([source], own)[0] + '\n# when it has finished:')
            options.load_from = str(source.train_dir / f'iter_{max_iters_of(source, own)}.pth')
        print('\n'.join(slurm_commands(runs, options)))
        return
    command = shlex.join(['python', 'tools/analysis/mixer_study.py',
                          *(sys.argv[1:] if argv is None else argv)])
    print(f'{len(rows)} rows x {len(args.seeds)} seeds = {len(runs)} runs in {options.work_dir}',
          flush=True)
    failed = 0
    if not args.table_only:
        counts = run_study(rows, runs, options, source)
        print(f"trained {counts['trained']}, evaluated {counts['evaluated']}, skipped "
              f"{counts['skipped']} finished runs", flush=True)
        if counts.get('failed'):
            failed = counts['failed']
        if options.costs and options.benchmark:
            benchmark(rows, options, args.bench_args)
    for path in write_study_outputs(rows, runs, options, command, source):
        print(f'wrote {path}')
    print((options.work_dir / 'study.md').read_text())
    if not args.table_only and failed:
        raise UserError(f'{failed} step(s) failed (FAILED lines above; logs in '
                        f'{options.work_dir / "logs"}); run the same command again to retry them')


if __name__ == '__main__':
    sys.exit(run_tool(main))
