"""Evaluate a checkpoint on a config's test set, with mmseg's tools/test.py flags.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out DIR] [--show] [--show-dir DIR]
                         [--tta] [--format-only DIR] [--report DIR] [--mixer SPEC]
                         [--verbose] [--cfg-options k=v ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [args]

Prints per-class IoU/Acc and mIoU (IoUMetric). ``--show-dir`` saves prediction overlays,
``--out`` keeps the raw prediction PNGs, ``--format-only DIR`` writes the Cityscapes test-server
format (labelIds PNGs, CityscapesMetric ``format_only``) instead of computing metrics.
``--report DIR`` also writes DIR/report.html: per-class IoU/Acc bars and table, the normalised
confusion matrix, the worst images by mIoU (image, ground truth, prediction, errors).
``--mixer SPEC`` as in tools/train.py (a config a ``--mixer`` training wrote into its work_dir
needs no switch). ``--cfg-options test_cfg.fp16=True`` evaluates under autocast (mmengine's
``TestLoop`` switch).
"""
import argparse
import os
import sys

from mmengine.config import DictAction

import afno_seg  # noqa: F401  (registers modules, checkpoint loader, optim/DDP wrappers)
from afno_seg.deployment import report  # noqa: F401  (registers SegReportMetric)
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.engine import UserError, run_test, run_tool
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='MMSeg test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the directory where the metrics are dumped as json')
    parser.add_argument('--out', type=str,
                        help='the directory to save output predictions for offline evaluation')
    parser.add_argument('--show', action='store_true', help='show prediction results')
    parser.add_argument('--show-dir', help='directory where painted images of every test image '
                        'are saved (relative to the work_dir unless absolute), in '
                        'SHOW_DIR/vis_data/vis_image/')
    parser.add_argument('--wait-time', type=float, default=2, help='the interval of show (s)')
    parser.add_argument('--format-only', metavar='DIR',
                        help='write Cityscapes test-server PNGs (labelIds) to DIR, no metrics')
    parser.add_argument('--report', metavar='DIR',
                        help='write an HTML evaluation report (confusion matrix, worst images)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override some settings in the used config, the key-value pair in xxx=yyy format '
        'will be merged into config file')
    parser.add_argument('--mixer', metavar='SPEC',
                        help='turn a SegFormer config (mmseg MixVisionTransformer or MixerMiT) '
                        'into MixerMiT with these token mixers: afno, afno+afno+esa+esa, '
                        'afno:sparsity_threshold=0.1 (tools/analysis/list_mixers.py lists them)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    parser.add_argument('--tta', action='store_true', help='test time augmentation')
    parser.add_argument('--verbose', action='store_true',
                        help="also print mmengine's environment, config, hooks and library "
                        'messages on the console (they always go to the log file)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def trigger_visualization_hook(cfg, args) -> None:
    hooks = cfg.default_hooks
    if 'visualization' not in hooks:
        raise UserError(f'--show/--show-dir need default_hooks.visualization in {args.config}, '
                        "e.g. visualization=dict(type='SegVisualizationHook')")
    hooks.visualization.draw = True
    hooks.visualization.interval = 1  # every image, not mmseg's default of every 50th
    if args.show:
        hooks.visualization.show = True
        hooks.visualization.wait_time = args.wait_time
    if args.show_dir:
        cfg.visualizer.save_dir = os.path.join(cfg.work_dir, args.show_dir)


def main(argv=None) -> None:
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)

    def apply_flags(cfg) -> None:
        if args.show or args.show_dir:
            trigger_visualization_hook(cfg, args)
        if args.tta:
            if 'tta_model' not in cfg or 'tta_pipeline' not in cfg:
                raise UserError(f'--tta needs tta_model and tta_pipeline in {args.config}')
            cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
            cfg.tta_model.module = cfg.model
            cfg.model = cfg.tta_model
        if args.out is not None:
            cfg.test_evaluator['output_dir'] = args.out
            cfg.test_evaluator['keep_results'] = True
        if args.format_only is not None:
            cfg.test_evaluator = dict(type='CityscapesMetric', format_only=True,
                                      output_dir=args.format_only, keep_results=True)
        if args.report is not None:
            if args.format_only is not None:
                raise UserError('--report needs ground truth: it cannot go with --format-only')
            evaluators = cfg.test_evaluator if isinstance(cfg.test_evaluator, list) else [
                cfg.test_evaluator]
            cfg.test_evaluator = [*evaluators, dict(type='SegReportMetric', out_dir=args.report,
                                                    title=f'{args.config} {args.checkpoint}')]

    run_test(args.config, args.checkpoint, args.work_dir, args.cfg_options, launcher=args.launcher,
             mixer=args.mixer, trust=args.trust_checkpoint, verbose=args.verbose,
             edit=apply_flags)


if __name__ == '__main__':
    sys.exit(run_tool(main))
