"""Train a segmentor (or classifier) from an OpenMMLab config, with mmseg's tools/train.py flags.

    python tools/train.py CONFIG [--work-dir DIR] [--resume | --overwrite] [--amp]
                          [--precision P] [--mixer SPEC] [--from-scratch] [--verbose]
                          [--cfg-options k=v ...]
    bash tools/dist_train.sh CONFIG GPUS [args]          # torchrun, --launcher pytorch

Beyond mmseg's own script: configs written for GPU fp16 run on a CPU (``--precision auto``:
float32, the fastest there; ``bf16`` autocast on request; ``fp16`` runs float16 with the
GPU's dynamic loss scale; BN for SyncBN, gloo for distributed runs), and a missing dataset, an
unknown model type, a misspelt key or a bad checkpoint stop at once with a message saying what to
do. A work dir belongs to one run: one that holds another run's checkpoints is refused unless
``--resume`` continues it or ``--overwrite`` starts over (the old files move to
``WORK_DIR/overwritten_<time>/``); ``--resume`` of a finished run reports it. The console shows
a header, progress and results; the run's log file has everything (``--verbose``: the console too).

Interruptions (docs/reliability.md): SIGTERM, SIGINT or SIGUSR1 finish the current iteration, save a
checkpoint and exit with status 75; run the same command with ``--resume`` to continue exactly.
A process restarted by torchrun (``--max-restarts``) or requeued by Slurm resumes by itself.

``--mixer SPEC`` trains any SegFormer config (a path or ``mmseg::segformer/...py``) with other token
mixers (:mod:`afno_seg.mixer_switch`); the derived config is written into the work_dir.
"""
import argparse
import logging
import os
import sys

from mmengine.config import DictAction
from mmengine.logging import print_log

import afno_seg  # noqa: F401  (registers modules, checkpoint loader, optim/DDP wrappers)
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.engine import PRECISIONS, UserError, run_tool, run_train
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a segmentor')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--resume', action='store_true', default=False,
                        help='continue from the checkpoint that work_dir/last_checkpoint names '
                        '(start from scratch when there is none; a finished run is reported, not '
                        'trained again); implied in a process that torchrun restarted or Slurm '
                        'requeued')
    parser.add_argument('--overwrite', action='store_true',
                        help='train from the start into a work_dir that holds another run; its '
                        'checkpoints, configs and logs move to WORK_DIR/overwritten_<time>/')
    parser.add_argument('--verbose', action='store_true',
                        help="also print mmengine's environment, config, hooks and library "
                        'messages on the console (they always go to the log file)')
    parser.add_argument('--amp', action='store_true', default=False,
                        help='enable automatic-mixed-precision training (AmpOptimWrapper, fp16 '
                        'with a dynamic loss scale; on a CPU as --precision says)')
    parser.add_argument('--precision', choices=PRECISIONS, default='auto',
                        help='auto (default): the config\'s on CUDA, fp32 on a CPU. fp16: float16 '
                        'autocast with a dynamic loss scale (on a CPU too); bf16; fp32')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override some settings in the used config, the key-value pair in xxx=yyy format '
        'will be merged into config file, e.g. train_dataloader.batch_size=2')
    parser.add_argument('--mixer', metavar='SPEC',
                        help='turn a SegFormer config (mmseg MixVisionTransformer or MixerMiT) '
                        'into MixerMiT with these token mixers: afno, afno+afno+esa+esa, '
                        'afno:sparsity_threshold=0.1 (tools/analysis/list_mixers.py lists them)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    parser.add_argument('--from-scratch', action='store_true',
                        help='train without the pretrained weights the config (or --mixer) '
                        'names; without this switch a missing pretrained file stops the run '
                        'before anything is built')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None) -> None:
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)

    def amp(cfg) -> None:
        if args.amp and args.precision == 'fp32':
            raise UserError('--amp asks for mixed precision, --precision fp32 for none: pick one')
        if not args.amp:
            return
        optim_wrapper = cfg.optim_wrapper.type
        if optim_wrapper == 'AmpOptimWrapper':
            print_log('AMP training is already enabled in your config.', logger='current',
                      level=logging.WARNING)
        elif optim_wrapper == 'OptimWrapper':
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.loss_scale = 'dynamic'
        else:
            raise UserError(f'--amp needs optim_wrapper.type OptimWrapper, but {args.config} '
                            f'has {optim_wrapper}.')

    run_train(args.config, args.work_dir, args.cfg_options, launcher=args.launcher,
              resume=args.resume, overwrite=args.overwrite, precision=args.precision,
              mixer=args.mixer, from_scratch=args.from_scratch, trust=args.trust_checkpoint,
              verbose=args.verbose, edit=amp)


if __name__ == '__main__':
    sys.exit(run_tool(main))
