"""Images per second of folder inference: mmseg's MMSegInferencer against tools/inference.py's
pipeline, same checkpoint, same folder, side by side in one process.

    python tools/analysis/benchmark_inference.py [--config configs/demo/segformer_afno_demo.py]
        [--frames 32] [--rounds 2] [--warmup 1] [--batch-size 4] [--workers 2] [--work-dir DIR]

The folder: the shared Cityscapes frame (../shared/data/cityscapes_sample) upsampled to 2048x1024,
``--frames`` copies, each shifted by a few pixels so that no two files are equal. The checkpoint:
the config's model at random initialisation, saved once (throughput does not depend on the
weights). Every runner writes a label PNG and a colour overlay per image: MMSegInferencer with
``out_dir`` (``pred/``, ``vis/``; ``with_labels=False``: no class names drawn, as ours),
tools/inference.py's :func:`afno_seg.deployment.segment_files` as the tool calls it
(``--workers``, ``--batch-size``) and as it ran before DataLoader workers, batching and the writer
thread (one image at a time, nothing overlapped). ``--warmup`` passes of each runner are not
timed; then the rounds alternate the runners and the medians are compared. The result and the
command line go to DIR/benchmark_inference.json.
"""
import argparse
import json
import os
import os.path as osp
import shutil
import statistics
import sys
import time

import cv2
import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import afno_seg  # noqa: F401  (registers modules)
from afno_seg.deployment import Segmenter, collect_inputs, load_segmentor, segment_files
from afno_seg.deployment.startup import quiet_known_warnings

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FRAME = osp.join(ROOT, '..', 'shared', 'data', 'cityscapes_sample', 'leftImg8bit', 'val',
                 'frankfurt', 'frankfurt_000000_000294_leftImg8bit.png')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='MMSegInferencer vs tools/inference.py')
    parser.add_argument('--config', default=osp.join(ROOT, 'configs/demo/segformer_afno_demo.py'))
    parser.add_argument('--frames', type=int, default=32)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--work-dir', default='work_dirs/benchmark_inference')
    return parser.parse_args(argv)


def make_folder(folder: str, frames: int) -> None:
    image = cv2.resize(cv2.imread(FRAME), (2048, 1024), interpolation=cv2.INTER_LINEAR)
    os.makedirs(folder, exist_ok=True)
    for index in range(frames):
        cv2.imwrite(osp.join(folder, f'frame{index:03d}_leftImg8bit.png'),
                    np.roll(image, 4 * index, axis=1))


def make_checkpoint(config: str, path: str) -> None:
    from mmseg.datasets import CityscapesDataset
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(config).model)
    model.init_weights()
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(dataset_meta=dict(CityscapesDataset.METAINFO))), path)


def main(argv=None) -> None:
    quiet_known_warnings()
    args = parse_args(argv)
    folder, checkpoint = osp.join(args.work_dir, 'frames'), osp.join(args.work_dir, 'model.pth')
    make_folder(folder, args.frames)
    make_checkpoint(args.config, checkpoint)
    paths = sorted(osp.join(folder, name) for name in os.listdir(folder))
    from mmseg.apis import MMSegInferencer
    inferencer = MMSegInferencer(args.config, checkpoint, device='cpu')
    segmenter = Segmenter(load_segmentor(args.config, checkpoint))
    files = collect_inputs([folder])
    out = osp.join(args.work_dir, 'out')

    def tool(workers: int, batch_size: int):
        return lambda: segment_files(segmenter, files, out, batch_size=batch_size, progress=False,
                                     workers=workers)

    runners = {
        'MMSegInferencer': lambda: inferencer(paths, batch_size=args.batch_size, out_dir=out,
                                              show=False, with_labels=False),
        'tools/inference.py': tool(args.workers, args.batch_size),
        'tools/inference.py, nothing overlapped': tool(0, 1),
    }
    seconds = {name: [] for name in runners}
    for round_ in range(1 - args.warmup, args.rounds + 1):  # rounds < 1: warm-up
        for name, run in runners.items():
            shutil.rmtree(out, ignore_errors=True)  # a rerun would skip every finished image
            start = time.perf_counter()
            run()
            if round_ > 0:
                seconds[name].append(time.perf_counter() - start)
            print(f'round {round_} {name}: {time.perf_counter() - start:.1f} s', flush=True)
    rates = {name: args.frames / statistics.median(values) for name, values in seconds.items()}
    base = rates['MMSegInferencer']
    result = dict(command=' '.join([sys.executable, *sys.argv]), config=args.config,
                  warmup=args.warmup, cpus=os.cpu_count(), load_average=os.getloadavg(),
                  frames=args.frames, size='2048x1024', batch_size=args.batch_size,
                  workers=args.workers, torch_threads=torch.get_num_threads(),
                  seconds=seconds, images_per_second={k: round(v, 3) for k, v in rates.items()},
                  ratio_to_mmseg={k: round(v / base, 2) for k, v in rates.items()})
    with open(osp.join(args.work_dir, 'benchmark_inference.json'), 'w') as file:
        json.dump(result, file, indent=2)
    for name, rate in rates.items():
        print(f'{name:42s} {rate:6.2f} images/s  {rate / base:5.2f}x MMSegInferencer')


if __name__ == '__main__':
    main()
