"""Segment images, folders, glob patterns or videos with a trained model.

    python tools/inference.py CONFIG CHECKPOINT INPUT... --out-dir DIR [--format cityscapes]
        [--opacity 0.5] [--device cpu|cuda] [--mode whole|slide] [--batch-size N] [--workers N]
        [--strict] [--labels DIR [--label-suffix OLD=NEW] [--report DIR] [--worst K]]
        [--backend pytorch|onnxruntime|openvino --onnx FILE] [--mixer SPEC] [--cfg-options k=v ...]
    bash tools/dist_inference.sh CONFIG CHECKPOINT PROCESSES INPUT... --out-dir DIR [args]

Writes DIR/labels/*.png (train ids; ``--format cityscapes``: labelIds for the test server),
DIR/overlays/*.png, DIR/videos/* (overlay video per input video) and DIR/summary.json (per input:
size, inference time, classes present). With ``--backend onnxruntime`` (or ``openvino``: the same
file compiled by OpenVINO for the CPU) the network runs from the ONNX file of
tools/deployment/pytorch2onnx.py and the config's pre/post-processing stays the same.
``--mixer SPEC`` as in tools/train.py; the derived config is written to DIR.

A bad input (undecodable, over ``--max-pixels``, refused by the model, outputs that cannot be
written) is skipped with one line naming it and listed in summary.json; the run goes on and exits
with status 1 naming the count (``--strict``: stop at the first). Rerunning the same command
(same checkpoint, config, format) skips every input whose outputs are complete, so a killed run
loses only the images in flight. Output names keep each input's path below its folder or
pattern; DIR may not be an input folder nor inside one. ``--workers`` processes decode,
equal-sized images go through in batches of ``--batch-size``, writing overlaps the next forward
pass. ``--launcher
pytorch`` (tools/dist_inference.sh): each rank takes every PROCESSES-th input, rank 0 writes the
summary and names what a dead rank left undone. ``--labels DIR``: ground-truth train-id PNGs
(``DIR/NAME.png``; ``--label-suffix _leftImg8bit=_gtFine_labelTrainIds`` maps Cityscapes names)
give an evaluation report, ``OUT_DIR/report/report.html`` (or ``--report DIR``).
"""
import argparse
import glob
import hashlib
import os
import sys
import tempfile

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
from afno_seg.deployment.files import glob_root
from afno_seg.deployment.report import report_on_files
from afno_seg.deployment.segment_files import PROGRESS_DIR, Shard
from afno_seg.deployment.startup import quiet_known_warnings
from afno_seg.engine import UserError, run_tool, write_switched_config
from afno_seg.engine.checkpoint import (
    TRUST_FLAG,
    TRUST_HELP,
    local_checkpoint_file,
    trusted_checkpoints,
)


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
    parser.add_argument('--workers', type=int, default=2,
                        help='DataLoader worker processes decoding images (0: none)')
    parser.add_argument('--strict', action='store_true',
                        help='stop at the first bad input instead of skipping it')
    parser.add_argument('--launcher', choices=['none', 'pytorch'], default='none',
                        help='pytorch: one share of the inputs per torchrun process')
    parser.add_argument('--labels', metavar='DIR',
                        help='ground-truth train-id PNGs (DIR/NAME.png): an evaluation report')
    parser.add_argument('--label-suffix', default='=', metavar='OLD=NEW',
                        help='label of input NAME: NAME with its ending OLD replaced by NEW, .png')
    parser.add_argument('--report', metavar='DIR', help='report folder (default: OUT_DIR/report)')
    parser.add_argument('--worst', type=int, default=8, help='worst images in the report')
    parser.add_argument('--max-pixels', type=int, metavar='N',
                        help='largest image (or video frame) in pixels; a larger one fails, named '
                        '(default: a quarter of the memory over what a pixel costs; 0: no cap)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--mixer', metavar='SPEC',
                        help='turn a SegFormer config (mmseg MixVisionTransformer or MixerMiT) '
                        'into MixerMiT with these token mixers: afno, afno+afno+esa+esa, '
                        'afno:sparsity_threshold=0.1 (tools/analysis/list_mixers.py lists them)')
    parser.add_argument(TRUST_FLAG, action='store_true', help=TRUST_HELP)
    return parser.parse_args(argv)


def label_files(args, files) -> dict[str, str]:
    """``{image path: ground-truth PNG}`` for ``--labels``; a missing one is refused."""
    old, _, new = args.label_suffix.partition('=')
    labels, missing = {}, []
    for item in files:
        stem = item.name[:-len(old)] if old and item.name.endswith(old) else item.name
        labels[item.path] = os.path.join(args.labels, stem + new + '.png')
        if not item.is_video and not os.path.isfile(labels[item.path]):
            missing.append(labels[item.path])
    if missing:
        raise UserError(f'--labels: no ground truth for {len(missing)} inputs, e.g. {missing[0]} '
                        '(set --label-suffix OLD=NEW to map image names to label names)')
    return labels


def check_out_dir(out_dir: str, specs, files) -> None:
    """Refuse an output folder that is an input folder or inside one (the next run would read its
    outputs as inputs, inputs could be overwritten), or that holds an input."""
    out = os.path.realpath(out_dir)
    for spec in specs:
        if not (os.path.isdir(spec) or glob.has_magic(spec)):
            continue
        root = os.path.realpath(spec if os.path.isdir(spec) else glob_root(spec))
        if out == root or out.startswith(root.rstrip(os.sep) + os.sep):
            raise UserError(f'--out-dir {out_dir} is inside the input folder {root}: the next run '
                            'would read its outputs as inputs; choose a folder outside it')
    inside = next((f.path for f in files if os.path.realpath(f.path).startswith(out + os.sep)),
                  None)
    if inside:
        raise UserError(f'input {inside} is inside --out-dir {out_dir}: outputs could overwrite '
                        'it; choose another --out-dir')


def check_writable(out_dir: str) -> None:
    try:
        os.makedirs(os.path.join(out_dir, PROGRESS_DIR), exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        raise UserError(f'--out-dir {out_dir} is not writable ({error.strerror}): fix its '
                        'permissions or choose another folder') from error


def join_launcher(args) -> Shard:
    """This process's share: the whole run alone, else its torchrun rank (the run id agreed on
    through one broadcast)."""
    if args.launcher == 'none':
        return Shard()
    import torch.distributed as dist

    from afno_seg.engine.distributed import init_cpu_process_group
    init_cpu_process_group()
    run_id = [Shard().run_id]
    dist.broadcast_object_list(run_id, src=0)
    shard = Shard(dist.get_rank(), dist.get_world_size(), run_id[0])
    dist.destroy_process_group()  # ranks meet again only through the output folder
    if args.device == 'cuda':
        args.device = f'cuda:{os.environ.get("LOCAL_RANK", 0)}'
    return shard


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def run_settings(args, model) -> dict:
    """What decides the outputs besides format and opacity: a rerun with other settings redoes
    the inputs instead of trusting the journal (an edited config, another checkpoint...)."""
    return dict(checkpoint=sha256_of(local_checkpoint_file(args.checkpoint)),
                config=hashlib.sha256(model.cfg.pretty_text.encode()).hexdigest(),
                backend=args.backend, onnx=sha256_of(args.onnx) if args.onnx else None)


def written_kinds(summary: dict) -> str:
    """``summary.json, labels/, overlays/`` and ``videos/`` only where something is there."""
    done = [e for e in summary['inputs'] if e['status'] == 'ok']
    kinds = ['labels/', 'overlays/'] if any('label' in e for e in done) else []
    return ', '.join(['summary.json', *kinds] + (['videos/'] if any(
        'video' in e for e in done) else []))


def outcome(summary: dict, out_dir: str) -> str | None:
    """The closing line's problem part: failures, inputs not done (by rank); None if all done."""
    problems = []
    failed = [e for e in summary['inputs'] if e['status'] == 'failed']
    if failed:
        problems.append(f'{len(failed)} of {summary["num_inputs"]} inputs failed (first: '
                        f'{failed[0]["input"]}: {failed[0]["error"]})')
    left = [e['rank'] for e in summary['inputs'] if e['status'] == 'not done']
    if left:
        ranks = ', '.join(f'rank {rank} left {left.count(rank)}' for rank in sorted(set(left)))
        dead = ', '.join(f'rank {rank}' for rank in summary['dead_ranks'])
        cause = ', '.join(([f'{dead} died'] if dead else []) + (
            [f'stopped by {summary["stopped_by"]}'] if summary['stopped_by'] else []))
        problems.append(f'{len(left)} inputs not done ({cause}: {ranks}); rerun the same '
                        'command to finish only those')
    return '; '.join(problems) + f' (all listed in {out_dir}/summary.json)' if problems else None


def main(argv=None) -> None:
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    args = parse_args(argv)
    if not 0.0 <= args.opacity <= 1.0 or args.batch_size < 1 or args.workers < 0 or (
            args.max_pixels or 0) < 0:
        raise UserError('--opacity must be in [0, 1], --batch-size >= 1, --workers >= 0 and '
                        '--max-pixels >= 0')
    if (args.backend != 'pytorch') != bool(args.onnx):
        raise UserError('--backend onnxruntime or openvino and --onnx FILE go together')
    if args.backend == 'openvino' and args.device != 'cpu':
        raise UserError('--backend openvino runs on the CPU: use --device cpu')
    if args.labels and args.format != 'trainids':
        raise UserError('--labels compares train ids: leave --format at trainids')
    files = collect_inputs(args.inputs)  # bad inputs fail before the model is built
    labels = label_files(args, files) if args.labels else None
    check_out_dir(args.out_dir, args.inputs, files)
    check_writable(args.out_dir)
    shard = join_launcher(args)
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
                            args.batch_size, meta, not args.no_progress and not shard.rank,
                            args.workers, args.strict, shard, run_settings(args, model),
                            args.max_pixels)
    if summary is None:  # another rank than 0: rank 0 reports
        return
    print(f'{summary["num_done"]} of {summary["num_inputs"]} inputs segmented into '
          f'{args.out_dir} ({summary["num_resumed"]} by an earlier run; {written_kinds(summary)})')
    if labels:
        done = [e for e in summary['inputs'] if e['status'] == 'ok' and 'label' in e]
        path = report_on_files(args.report or os.path.join(args.out_dir, 'report'),
                               [(e['input'], e['label'], labels[e['input']]) for e in done],
                               list(model.dataset_meta['classes']), model.dataset_meta['palette'],
                               args.worst, f'{args.config} {args.checkpoint}')
        print(f'evaluation report: {path}')
    problem = outcome(summary, args.out_dir)
    if problem:
        raise UserError(problem)


if __name__ == '__main__':
    sys.exit(run_tool(main))
