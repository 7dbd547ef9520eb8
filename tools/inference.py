"""Segment images, folders, glob patterns or videos with a trained model.

    python tools/inference.py CONFIG CHECKPOINT INPUT... --out-dir DIR [--format cityscapes]
        [--opacity 0.5] [--device cpu|cuda] [--mode whole|slide] [--batch-size N]
        [--backend pytorch|onnxruntime|openvino --onnx FILE] [--mixer SPEC] [--cfg-options k=v ...]

Writes DIR/labels/*.png (train ids; ``--format cityscapes``: labelIds for the test server),
DIR/overlays/*.png, DIR/videos/* (overlay video per input video) and DIR/summary.json (per input:
size, inference time, classes present). With ``--backend onnxruntime`` (or ``openvino``: the same
file compiled by OpenVINO for the CPU) the network runs from the ONNX file of
tools/deployment/pytorch2onnx.py and the config's pre/post-processing stays the same.
``--mixer SPEC`` as in tools/train.py; the derived config is written to DIR.
"""
import argparse
import sys

from mmengine.config import DictAction

import afno_seg  # noqa: F401  (registers modules and the checkpoint loader)
from afno_seg.deployment import (
    Segmenter,
    collect_inputs,
    load_segmentor,
    onnx_session,
    openvino_session,
    segment_files,
    use_onnxruntime,
)
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint import add_trust_argument, trusted_checkpoints
from afno_seg.mixer_switch import write_switched_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Segment images or videos with a trained model')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file (as tools/train.py writes)')
    parser.add_argument('inputs', nargs='+', metavar='INPUT',
                        help='image files, folders (recursive), glob patterns, .mp4/.avi videos')
    parser.add_argument('--out-dir', required=True, help='folder for labels, overlays, summary')
    parser.add_argument('--format', choices=['trainids', 'cityscapes'], default='trainids',
                        help='label PNGs as train ids, or Cityscapes labelIds (test server)')
    parser.add_argument('--opacity', type=float, default=0.5, help='overlay colour weight')
    parser.add_argument('--device', default='cpu', help='cpu, cuda or cuda:N')
    parser.add_argument('--mode', choices=['whole', 'slide'],
                        help="whole image or sliding windows (default: the config's)")
    parser.add_argument('--batch-size', type=int, default=1, help='images per forward pass')
    parser.add_argument('--backend', choices=['pytorch', 'onnxruntime', 'openvino'],
                        default='pytorch')
    parser.add_argument('--onnx', help='the ONNX file for --backend onnxruntime or openvino')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--mixer', metavar='SPEC',
                        help='turn a SegFormer config (mmseg MixVisionTransformer or MixerMiT) '
                        'into MixerMiT with these token mixers: afno, afno+afno+esa+esa, '
                        'afno:sparsity_threshold=0.1 (tools/analysis/list_mixers.py lists them)')
    add_trust_argument(parser)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)
    if not 0.0 <= args.opacity <= 1.0 or args.batch_size < 1:
        raise UserError('--opacity must be in [0, 1] and --batch-size >= 1')
    if (args.backend != 'pytorch') != bool(args.onnx):
        raise UserError('--backend onnxruntime or openvino and --onnx FILE go together')
    if args.backend == 'openvino' and args.device != 'cpu':
        raise UserError('--backend openvino runs on the CPU: use --device cpu')
    files = collect_inputs(args.inputs)  # bad inputs fail before the model is built
    session = None
    if args.backend == 'onnxruntime':
        session = onnx_session(args.onnx, device=args.device)
    elif args.backend == 'openvino':
        session = openvino_session(args.onnx)
    config = write_switched_config(args.config, args.mixer, args.out_dir, args.cfg_options)
    with trusted_checkpoints(args.trust_checkpoint):
        model = load_segmentor(config, args.checkpoint, args.device, args.cfg_options, args.mode)
    if session is not None:
        use_onnxruntime(model, session, args.onnx)
    meta = dict(config=args.config, checkpoint=args.checkpoint, backend=args.backend,
                onnx=args.onnx, device=args.device, mode=model.test_cfg.get('mode', 'whole'))
    summary = segment_files(Segmenter(model), files, args.out_dir, args.format, args.opacity,
                            args.batch_size, meta, progress=not args.no_progress)
    print(f'{summary["num_inputs"]} inputs segmented into {args.out_dir} '
          f'(summary.json, labels/, overlays/, videos/)')


if __name__ == '__main__':
    sys.exit(run_tool(main))
