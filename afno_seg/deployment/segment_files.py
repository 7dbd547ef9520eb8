"""Segment image and video files into an output folder: what ``tools/inference.py`` does.

For an input ``NAME`` (its path below the folder or pattern it was found through):
``OUT/labels/NAME.png`` and ``OUT/overlays/NAME.png``, or ``OUT/videos/NAME.mp4`` for a video;
``OUT/summary.json`` lists every input. docs/inference.md ("Dataset scale") has the guarantees:
bad files and failed writes are one failure each, SIGTERM/SIGINT write what was predicted and
stop, and a rerun of the same settings redoes nothing: each process appends a JSON line per input
written to its journal ``OUT/.progress/RUN-rankR.jsonl`` (first line: the process and the run's
:func:`settings_key`), which :func:`completed_inputs` reads back.

Shards: rank ``r`` of ``w`` takes inputs ``r, r + w, ...``; ranks meet only through the output
folder. Each writes ``RUN-rankR.end`` once its journal is complete (fsynced, closed); rank 0
waits until every rank has ended or died (after a stop signal of its own, at most
``STOP_GRACE_S``), then merges the journals into ``summary.json`` by the rule a rerun uses.
"""
import functools
import glob
import hashlib
import itertools
import json
import os
import os.path as osp
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from mmcv import VideoReader
from mmengine.utils import ProgressBar
from torch.utils.data import DataLoader

from ..engine.atomic_io import SaveError, atomic_write, remove_stale_temp_files
from ..engine.checkpoint_hook import StopSignals
from ..engine.dataloader_faults import leave_stop_signals_to_parent
from ..engine.distributed import process_running
from ..engine.errors import UserError
from .files import (
    InputFile,
    VideoOverlayWriter,
    open_video,
    overlay,
    read_image,
    to_label_ids,
    write_png,
)
from .predictor import Segmenter

__all__ = ['PROGRESS_DIR', 'Shard', 'completed_inputs', 'default_max_pixels', 'segment_files']

PROGRESS_DIR = '.progress'
OUTPUT_KEYS = ('label', 'overlay', 'video')
STOP_GRACE_S = 10.0  # rank 0, stopped: how long it waits for ranks neither ended nor seen dead


@dataclass
class Shard:
    """This process's rank, the number of ranks, and the run's id (naming journals and end
    markers: the same in every rank, new for every run)."""
    rank: int = 0
    world_size: int = 1
    run_id: str = field(default_factory=lambda: os.urandom(6).hex())


def settings_key(settings: dict) -> str:
    """16 hex digits naming what decides a run's outputs (journals count only for the same key)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _journal_entries(journal: str) -> tuple[dict | None, list[dict]]:
    """``(header, entries)`` of one journal; damaged lines (not UTF-8, not JSON, not an entry)
    are named on stderr, a last line cut by a kill is skipped silently."""
    with open(journal, 'rb') as file:
        lines = file.read().split(b'\n')
    header, entries, damaged = None, [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line.decode('utf-8'))
            valid = isinstance(entry, dict) and (('input' not in entry and number == 1) or (
                isinstance(entry.get('input'), str) and entry.get('status') in ('ok', 'failed')
                and all(isinstance(entry.get(key, ''), str)
                        for key in (*OUTPUT_KEYS, 'real', 'error'))))
        except ValueError:  # UnicodeDecodeError included
            valid = False
        if not valid:
            if number < len(lines):  # the final line without its newline: a cut write
                damaged.append(number)
        elif 'input' in entry:
            entries.append(entry)
        else:
            header = entry
    if damaged:
        print(f'{journal}: {len(damaged)} damaged line(s) skipped (first: line {damaged[0]}); '
              'their inputs are redone', file=sys.stderr, flush=True)
    return header, entries


def completed_inputs(out_dir: str, run_id: str = '', settings: str = '') -> dict[str, dict]:
    """``{real input path: entry}`` of every journal under ``out_dir`` written with ``settings``,
    the latest line of each input winning; ``ok`` entries whose outputs are gone are dropped,
    those from another run than ``run_id`` get ``resumed=True``."""
    entries = {}
    for journal in sorted(glob.glob(osp.join(out_dir, PROGRESS_DIR, '*.jsonl')), key=osp.getmtime):
        earlier = not osp.basename(journal).startswith(f'{run_id}-rank')
        header, lines = _journal_entries(journal)
        if (header or {}).get('settings', '') != settings:
            continue  # another checkpoint, config, format...: its outputs are not this run's
        for entry in lines:
            if earlier and entry['status'] == 'ok':
                entry['resumed'] = True
            entries[entry.get('real') or osp.realpath(entry['input'])] = entry
    return {path: entry for path, entry in entries.items() if entry['status'] != 'ok' or all(
        osp.isfile(entry[key]) for key in OUTPUT_KEYS if key in entry)}


def _reason(error: BaseException, path: str) -> str:
    text = str(error) if isinstance(error, UserError) else f'{type(error).__name__}: {error}'
    return text[len(path) + 2:] if text.startswith(path + ': ') else text


def default_max_pixels(num_classes: int) -> int:
    """The pixel cap of one image: a quarter of this machine's memory over what a pixel costs
    (the logits resized to the image, float32, the overlay in float32, the image itself)."""
    memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    return int(memory // 4 // (4 * num_classes + 4 * 3 + 8))


def _too_large(height: int, width: int, max_pixels: int) -> str | None:
    if max_pixels and height * width > max_pixels:
        return (f'{width}x{height} ({height * width:,} pixels) is over the cap of '
                f'{max_pixels:,} pixels an image (--max-pixels): downscale it, or raise the cap '
                'if this machine has the memory')
    return None


def _decode(prepare, max_pixels: int, item: InputFile) -> tuple:
    """``(item, BGR image, pipeline output, failure reason)`` of an image, made in a worker."""
    try:
        image = read_image(item.path)
        reason = _too_large(*image.shape[:2], max_pixels)
        if reason:
            return item, None, None, reason
        return item, image, prepare(image), None
    except Exception as error:  # any bad file is a failure of its own, named
        return item, None, None, _reason(error, item.path)


class _Run:
    """One process's share: the journal, the writer thread, failures, the progress bar."""

    def __init__(self, segmenter, out_dir, shard, label_format, opacity, strict, steps, progress,
                 stops: StopSignals, settings: str, max_pixels: int):
        meta = segmenter.model.dataset_meta
        self.classes, self.palette = list(meta['classes']), np.asarray(meta['palette'])
        self.segmenter, self.out_dir, self.strict, self.stops = segmenter, out_dir, strict, stops
        self.label_format, self.opacity, self.max_pixels = label_format, opacity, max_pixels
        os.makedirs(osp.join(out_dir, PROGRESS_DIR), exist_ok=True)
        for kind in ('labels', 'overlays', 'videos'):  # what a killed run of this host was writing
            for folder, _, _ in os.walk(osp.join(out_dir, kind)):
                remove_stale_temp_files(folder)
        self.journal = open(osp.join(out_dir, PROGRESS_DIR,
                                     f'{shard.run_id}-rank{shard.rank}.jsonl'), 'a')
        self.lock, self.pending = threading.Lock(), deque()
        self.record(dict(rank=shard.rank, host=socket.gethostname(), pid=os.getpid(),
                         settings=settings))
        self.pool = ThreadPoolExecutor(1, thread_name_prefix='afno_seg_writer')
        self.bar = ProgressBar(steps) if progress and steps else None

    @property
    def stopped_by(self) -> str | None:
        """The name of the stop signal received (SIGTERM, SIGINT), if any."""
        return self.stops.received.name if self.stops.received else None

    def record(self, entry: dict) -> None:
        with self.lock:
            self.journal.write(json.dumps(entry) + '\n')
            self.journal.flush()

    def fail(self, item: InputFile, reason: str) -> None:
        self.record(dict(input=item.path, real=osp.realpath(item.path), status='failed',
                         error=reason))
        message = f'{item.path}: {reason}'
        if self.strict:
            raise UserError(message + ' (without --strict, bad inputs are skipped and listed)')
        print(f'skipped {message}', flush=True, file=sys.stderr)

    def submit(self, function, *args) -> None:
        """Run ``function`` in the writer thread, a few batches behind at most; raises its error."""
        self.pending.append(self.pool.submit(function, *args))
        while len(self.pending) > 4 or (self.pending and self.pending[0].done()):
            self.pending.popleft().result()

    def close(self) -> None:
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            self.pool.shutdown()
            self.journal.flush()
            os.fsync(self.journal.fileno())  # complete before the end marker, on any file system
            self.journal.close()
            if self.bar:
                print()  # end the progress bar's line

    def predict(self, batch: list) -> None:
        try:
            predictions = self.segmenter.predict([prepared for _, _, prepared in batch])
        except UserError as error:
            for item, _, _ in batch:
                self.fail(item, _reason(error, item.path))
            return
        for (item, image, _), prediction in zip(batch, predictions):
            self.submit(self.write_image, item, image, prediction)
            if self.bar:
                self.bar.update()

    def class_names(self, ids) -> list[str]:
        return [self.classes[i] for i in sorted(ids) if i < len(self.classes)]

    def write_image(self, item: InputFile, image: np.ndarray, prediction) -> None:
        label, stem = prediction.label, item.name + '.png'
        try:
            written = dict(
                label=write_png(osp.join(self.out_dir, 'labels', stem), to_label_ids(label)
                                if self.label_format == 'cityscapes' else label),
                overlay=write_png(osp.join(self.out_dir, 'overlays', stem),
                                  overlay(image, label, self.palette, self.opacity)))
        except (OSError, UserError) as error:  # a name too long, a full disk: this file's failure
            cause = error.__cause__ if isinstance(error, SaveError) else error
            return self.fail(item, f'cannot write its outputs: {_reason(cause, item.path)}')
        self.record(dict(input=item.path, real=osp.realpath(item.path), status='ok',
                         height=int(image.shape[0]), width=int(image.shape[1]),
                         seconds=round(prediction.seconds, 4),
                         classes=self.class_names(np.unique(label).tolist()), **written))

    def images(self, items: Sequence[InputFile], batch_size: int, workers: int) -> None:
        # batch_size=None: the workers apply collate_fn to each item alone
        loader = DataLoader(items, batch_size=None, num_workers=workers if items else 0,
                            collate_fn=functools.partial(_decode, self.segmenter.prepare,
                                                         self.max_pixels),
                            worker_init_fn=leave_stop_signals_to_parent)
        buckets: dict[tuple, list] = {}
        for item, image, prepared, reason in loader:
            if self.stopped_by:
                return
            if reason is not None:
                self.fail(item, reason)
                continue
            shape = tuple(prepared['inputs'].shape)
            buckets.setdefault(shape, []).append((item, image, prepared))
            if len(buckets[shape]) == batch_size:
                self.predict(buckets.pop(shape))
        for bucket in buckets.values():
            self.predict(bucket)

    def video(self, item: InputFile, batch_size: int) -> None:
        """Overlay every frame of a video into ``OUT/videos/NAME.<suffix>``."""
        try:
            video = open_video(item.path)
        except UserError as error:
            return self.fail(item, _reason(error, item.path))
        fps, frames = video.fps or 25.0, (frame for frame in video)  # islice(video) would rewind
        reason = _too_large(video.height, video.width, self.max_pixels)
        if reason:
            return self.fail(item, reason)
        writer = VideoOverlayWriter(osp.join(self.out_dir, 'videos', item.name + osp.splitext(
            item.path)[1].lower()), fps)
        seen, seconds, shape, start, complete = set(), 0.0, (0, 0), time.perf_counter(), False
        try:
            while not self.stopped_by and (chunk := list(itertools.islice(frames, batch_size))):
                for image, prediction in zip(chunk, self.segmenter(chunk)):
                    writer.write(overlay(image, prediction.label, self.palette, self.opacity))
                    seen.update(np.unique(prediction.label).tolist())
                    seconds, shape = seconds + prediction.seconds, image.shape
                    if self.bar:
                        self.bar.update()
            complete = not self.stopped_by
        except Exception as error:  # noqa: BLE001  one bad video is one failure, named
            return self.fail(item, f'failed at frame {writer.frames}: {_reason(error, item.path)}')
        finally:
            writer.close(complete=complete)  # the final name only for a whole video
        if self.stopped_by:
            return
        self.record(dict(input=item.path, real=osp.realpath(item.path), status='ok',
                         video=writer.path, frames=writer.frames,
                         fps=fps, height=int(shape[0]), width=int(shape[1]),
                         seconds=round(seconds / max(writer.frames, 1), 4),
                         total_seconds=round(time.perf_counter() - start, 2),
                         classes=self.class_names(seen)))


def _wait_for_ranks(prefix: str, world_size: int, stops: StopSignals) -> list[int]:
    """Wait until ranks ``1 .. world_size - 1`` of the run ``prefix`` have each written their end
    marker or died; after a stop signal, :data:`STOP_GRACE_S` at most. Returns the dead ranks."""
    deadline = None
    while True:  # polled, so that a stop signal or a dead rank is seen at once
        waiting = [rank for rank in range(1, world_size)
                   if not osp.exists(f'{prefix}-rank{rank}.end')]
        dead = [rank for rank in waiting if _died(f'{prefix}-rank{rank}.jsonl')]
        if stops.received and deadline is None:
            deadline = time.monotonic() + STOP_GRACE_S
        if dead == waiting or (deadline is not None and time.monotonic() > deadline):
            return dead
        time.sleep(0.1)


def _died(journal: str) -> bool:
    """Whether the process that opened ``journal`` (on this host) is gone or a zombie."""
    try:
        with open(journal) as file:
            first = json.loads(file.readline())
    except (OSError, ValueError):  # not started yet, or writing its first line
        return False
    return first['host'] == socket.gethostname() and not process_running(first['pid'])


def segment_files(segmenter: Segmenter, files: Sequence[InputFile], out_dir: str,
                  label_format: str = 'trainids', opacity: float = 0.5, batch_size: int = 1,
                  meta: dict | None = None, progress: bool = True, workers: int = 0,
                  strict: bool = False, shard: Shard | None = None, settings: dict | None = None,
                  max_pixels: int | None = None) -> dict | None:
    """Segment this process's share of ``files`` not done yet; rank 0 writes ``summary.json``.

    Args:
        segmenter (Segmenter): The model (PyTorch, onnxruntime or OpenVINO backend).
        files (Sequence[InputFile]): From :func:`.collect_inputs` (the same list in every rank).
        out_dir (str): Output folder.
        label_format (str): ``'trainids'`` or ``'cityscapes'`` (labelIds). Default: 'trainids'.
        opacity (float): Colour weight of the overlays, in [0, 1]. Default: 0.5.
        batch_size (int): Images per forward pass (equal-sized ones share a batch). Default: 1.
        meta (dict, optional): Extra summary entries (config, backend, ...). Default: None.
        progress (bool): mmengine's progress bar (a step per image or frame). Default: True.
        workers (int): DataLoader processes decoding images (0: this one). Default: 0.
        strict (bool): Stop at the first bad input (a :class:`UserError`). Default: False.
        shard (Shard, optional): This process's rank in a sharded run. Default: one process.
        settings (dict, optional): What else decides the outputs (checkpoint and config digests,
            backend); a rerun trusts only journals of equal settings. Default: None.
        max_pixels (int, optional): Cap on an image's (a frame's) pixels, larger ones fail; None:
            :func:`default_max_pixels`; 0: no cap. Default: None.

    Returns:
        dict | None: Rank 0: the summary written to ``out_dir/summary.json``; other ranks: None.
    """
    shard = shard or Shard()
    key = settings_key(dict(settings or {}, label_format=label_format, opacity=opacity))
    if max_pixels is None:
        max_pixels = default_max_pixels(len(segmenter.model.dataset_meta['classes']))
    earlier = completed_inputs(out_dir, settings=key)
    todo = [item for item in files[shard.rank::shard.world_size]
            if earlier.get(osp.realpath(item.path), {}).get('status') != 'ok']
    images = [item for item in todo if not item.is_video]
    videos = [item for item in todo if item.is_video]
    steps = len(images) + sum(max(VideoReader(item.path).frame_cnt, 0) for item in videos
                              if osp.isfile(item.path))  # a bad video: 0, failed later
    # The first SIGTERM/SIGINT is recorded (the run stops in order), a later one exits at once.
    with StopSignals(('SIGTERM', 'SIGINT')) as stops:
        run = _Run(segmenter, out_dir, shard, label_format, opacity, strict, steps, progress, stops,
                   key, max_pixels)
        try:
            run.images(images, batch_size, workers)
            for item in videos:
                if not run.stopped_by:
                    run.video(item, batch_size)
        finally:
            run.close()
        stopped = run.stopped_by
        prefix = osp.join(out_dir, PROGRESS_DIR, shard.run_id)
        atomic_write(stopped or '', f'{prefix}-rank{shard.rank}.end')
        if shard.rank:
            if stopped:
                raise UserError(f'rank {shard.rank} stopped by {stopped}; rerun the same '
                                'command to finish what it left')
            return None
        dead = _wait_for_ranks(prefix, shard.world_size, stops)
    done = completed_inputs(out_dir, shard.run_id, key)
    entries = [done.get(osp.realpath(item.path)) or dict(
        input=item.path, status='not done', rank=index % shard.world_size)
        for index, item in enumerate(files)]
    count = Counter(entry['status'] for entry in entries)
    summary = dict(**(meta or {}), label_format=label_format, num_inputs=len(entries),
                   num_done=count['ok'], num_failed=count['failed'],
                   num_not_done=count['not done'], num_resumed=sum('resumed' in e for e in entries),
                   stopped_by=stopped, world_size=shard.world_size, dead_ranks=dead, inputs=entries)
    atomic_write(json.dumps(summary, indent=2) + '\n', osp.join(out_dir, 'summary.json'))
    return summary
