"""Export a trained segmentor to ONNX and check the file against PyTorch with onnxruntime.

    python tools/deployment/pytorch2onnx.py CONFIG CHECKPOINT --shape H W --out FILE.onnx
        [--dynamic] [--opset 20] [--dft auto|op|matmul] [--cfg-options k=v ...]

The graph takes the normalised image ``(1, 3, H, W)`` (what the config's data preprocessor
makes of an image) and returns the logits ``(1, num_classes, H, W)``, mmseg's deployment
convention (``EncoderDecoder.encode_decode``); standard ONNX ops only. ``--dft`` writes the
spectral mixers' transforms as ONNX ``DFT`` ops (``op``) or as matmuls with constant DFT matrices
(``matmul``: faster in onnxruntime, and the form OpenVINO runs); ``auto`` (default) is matmul,
op with ``--dynamic`` (docs/inference.md). ``--dynamic`` makes H and W dynamic where every mixer
allows it. After writing the file the tool runs onnxruntime on a random input and prints the max
abs difference to PyTorch.
"""
import argparse
import sys

import torch
from mmengine.config import DictAction

import afno_seg  # noqa: F401  (registers modules and the checkpoint loader)
from afno_seg.deployment import export_onnx, load_segmentor, onnx_max_abs_difference, onnx_session
from afno_seg.deployment.onnx_export import DFT_CHOICES, resolve_dft
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.engine import UserError, run_tool
from afno_seg.engine.checkpoint import TRUST_FLAG, TRUST_HELP, trusted_checkpoints


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Export a segmentor to ONNX')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--shape', type=int, nargs=2, required=True, metavar=('H', 'W'),
                        help='input height and width of the exported graph')
    parser.add_argument('--out', required=True, help='the .onnx file to write')
    parser.add_argument('--dynamic', action='store_true', help='dynamic input height and width')
    parser.add_argument('--opset', type=int, default=20, help='ONNX opset (>= 17)')
    parser.add_argument('--dft', choices=DFT_CHOICES, default='auto',
                        help='spectral transforms as DFT ops or matmuls (auto: matmul, op with '
                        '--dynamic)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)
    if min(args.shape) < 32 or args.opset < 17:
        raise UserError('--shape needs H, W >= 32 and --opset >= 17')
    with trusted_checkpoints(args.trust_checkpoint):
        model = load_segmentor(args.config, args.checkpoint, 'cpu', args.cfg_options)
    form, note = resolve_dft(args.dft, args.dynamic)
    if note:
        print(note)
    export_onnx(model, args.shape, args.out, dynamic=args.dynamic, opset=args.opset, dft=form)
    inputs = torch.randn(1, 3, *args.shape, generator=torch.Generator().manual_seed(0))
    difference = onnx_max_abs_difference(model, onnx_session(args.out), inputs)
    print(f'wrote {args.out}: inputs (1, 3, {args.shape[0]}, {args.shape[1]})'
          f'{" dynamic H, W" if args.dynamic else ""} -> seg_logits, DFT as {form}; onnxruntime '
          f'vs PyTorch on '
          f'a random input: max abs difference {difference:.3g}')


if __name__ == '__main__':
    sys.exit(run_tool(main))
