"""The mixer study of ``tools/analysis/mixer_study.py``: train, evaluate, count FLOPs.

:func:`run_study` trains every run (:mod:`.study_plan`) not trained to its last iteration
(resuming; torchrun with ``gpus > 1``), evaluates it at each scale whose metrics JSON is missing
(the headline scale of every run first), optionally analyses the spectrum of each row's first
seed, and counts each row's FLOPs. Each step is a process of its own (:mod:`.study_jobs`) logging
into ``logs/`` in the work dir; progress lines go to stdout. A transplant study (``load_from``)
starts every training from one checkpoint, each row's mixers new in it; its source is a given
checkpoint or a run trained first (:func:`train_source`).
"""
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine.errors import UserError
from ..engine.runner import load_config
from . import study_jobs
from .study_jobs import parsed_cfg_options
from .study_plan import Run, cost_config_of, scale_options

__all__ = ['StudyOptions', 'cost_files', 'eval_metrics_file', 'final_checkpoint', 'max_iters_of',
           'pending_benchmark', 'run_logged', 'run_study', 'slurm_commands', 'source_options',
           'train_command', 'train_source']


@dataclass
class StudyOptions:
    """What ``tools/analysis/mixer_study.py`` passes to :func:`run_study`: its options (see its
    ``--help``), ``--no-X`` as ``X=False``. Sequences are stored as lists."""

    work_dir: Path  # runs, logs, costs and the table
    seeds: Sequence[int] = (0, )
    gpus: int = 1  # per training run; torchrun above 1
    cfg_options: Sequence[str] | None = None  # raw 'key=value' strings, passed on as they are
    eval_scales: Sequence[float] = (1.0, )  # the first one is the headline column
    cost_config: str | None = None
    cost_shape: Sequence[int] | None = None
    costs: bool = True
    benchmark: bool = True
    spectrum: bool = False
    spectrum_images: int = 4
    partition: str = 'PARTITION'
    runs: bool = True  # False: costs (and spectrum) only
    bench_max_params_m: float | None = None
    train: bool = True  # False: evaluate only what is trained (e.g. beside a running study)
    load_from: str | None = None  # transplant: every training starts from this checkpoint
    source_cfg_options: Sequence[str] | None = None  # transplant source's training, added
    earlier_csv: str | None = None  # per-seed mIoU of rows without runs here (the table's)

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir)
        self.seeds = list(self.seeds)
        self.cfg_options = list(self.cfg_options or [])
        self.source_cfg_options = list(self.source_cfg_options or [])
        self.eval_scales = [float(s) for s in self.eval_scales]


def _job(job: str, **kwargs) -> list[str]:
    return [sys.executable, '-m', study_jobs.__name__, job, json.dumps(kwargs)]


def final_checkpoint(run: Run, max_iters: int) -> Path | None:
    """The final checkpoint of a finished training, else None."""
    pointer = run.train_dir / 'last_checkpoint'
    if not pointer.is_file():
        return None
    path = Path(pointer.read_text().strip())
    if not path.is_absolute():
        path = run.train_dir / path.name
    return path if path.name == f'iter_{max_iters}.pth' and path.is_file() else None


def eval_metrics_file(eval_dir: Path) -> Path | None:
    """The metrics JSON ``tools/test.py --work-dir eval_dir`` wrote (``<ts>/<ts>.json``)."""
    files = sorted(eval_dir.glob('*/*.json')) if eval_dir.is_dir() else []
    return files[-1] if files else None


def train_command(run: Run, options: StudyOptions) -> list[str]:
    """Training command of ``run`` (resuming when it has a checkpoint to resume from, else
    starting from ``options.load_from`` where set)."""
    kwargs = dict(config=run.row.train_config, work_dir=str(run.train_dir),
                  cfg_options=[f'randomness.seed={run.seed}', *options.cfg_options],
                  resume=(run.train_dir / 'last_checkpoint').is_file())
    if options.load_from and not kwargs['resume']:  # mmengine: resume + load_from resumes it
        kwargs['load_from'] = str(options.load_from)
    if options.gpus <= 1:
        return _job('train', **kwargs)
    # torchrun on one node, as tools/dist_train.sh
    return [sys.executable, '-m', 'torch.distributed.run', '--standalone',
            f'--nproc_per_node={options.gpus}', *_job('train', launcher='pytorch', **kwargs)[1:]]


def slurm_commands(runs: list[Run], options: StudyOptions) -> list[str]:
    """``tools/slurm_train.sh`` lines for every run (the study then evaluates what they train)."""
    lines = []
    for run in runs:
        args = [run.row.train_config, '--work-dir', str(run.train_dir), '--resume',
                '--cfg-options', f'randomness.seed={run.seed}', *options.cfg_options,
                *([f'load_from={options.load_from}'] if options.load_from else [])]
        job = f'{run.row.row_id}_s{run.seed}'
        lines.append(f'GPUS={options.gpus} bash tools/slurm_train.sh {options.partition} '
                     f'{job} ' + ' '.join(shlex.quote(a) for a in args))
    return lines


def run_logged(command: list[str], log_path: Path, prefix: str) -> None:
    """Run ``command``, its output into ``log_path``, training iterations echoed with ``prefix``;
    a SIGTERM meanwhile stops it too. A failure is a :class:`UserError` naming the log."""
    process = None

    def stop(signum, frame):  # noqa: ARG001
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        raise SystemExit(128 + signum)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with open(log_path, 'a') as log:
            log.write(f'$ {shlex.join(command)}\n')
            log.flush()
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True)
            for line in process.stdout:
                log.write(line)
                if 'Iter(train)' in line:
                    brief = line.split('Iter(train)', 1)[1].strip()
                    print(f'{prefix} {brief[:110]}', flush=True)
            code = process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code:
        tail = ''.join(open(log_path).readlines()[-5:])
        step = command[command.index(study_jobs.__name__) + 1] \
            if study_jobs.__name__ in command else command[1]
        raise UserError(f'{prefix.rstrip(":")}: {step} failed (exit {code}); see {log_path}. '
                        f'Last lines:\n{tail}')


def max_iters_of(run: Run, options: StudyOptions) -> int:
    cfg = load_config(run.row.train_config, cfg_options=parsed_cfg_options(options.cfg_options))
    return cfg.train_cfg.max_iters


def source_options(options: StudyOptions) -> StudyOptions:
    """The options the transplant's source is trained with (``--source-cfg-options`` added) and
    evaluated with (the headline scale)."""
    return replace(options, cfg_options=[*options.cfg_options, *options.source_cfg_options],
                   eval_scales=options.eval_scales[:1], load_from=None, spectrum=False)


def _run_one(run: Run, index: int, total: int, options: StudyOptions, scales: list[float]) -> dict:
    """Train one run and evaluate it at ``scales``, skipping what is done; returns what it did."""
    prefix = f'[{index}/{total}] {run.name}:' if total else f'{run.name}:'
    cfg = load_config(run.row.train_config, cfg_options=parsed_cfg_options(options.cfg_options))
    max_iters = cfg.train_cfg.max_iters
    logs = options.work_dir / 'logs'
    pending = [s for s in scales if eval_metrics_file(run.eval_dir(s)) is None]
    done = dict(trained=False, evaluated=[])
    if not pending:
        if all(eval_metrics_file(run.eval_dir(s)) for s in options.eval_scales) and \
                scales == options.eval_scales[:1]:
            print(f'{prefix} finished earlier (metrics found), skipped', flush=True)
        return done
    checkpoint = final_checkpoint(run, max_iters)
    if checkpoint is None and not options.train:
        print(f'{prefix} not trained (yet), skipped', flush=True)
        return done
    if checkpoint is None:
        resume = (run.train_dir / 'last_checkpoint').is_file()
        print(f'{prefix} train{" (resuming)" if resume else ""}, {max_iters} iterations',
              flush=True)
        run_logged(train_command(run, options), logs / f'{run.row.row_id}_s{run.seed}_train.log',
                   prefix)
        checkpoint = final_checkpoint(run, max_iters)
        if checkpoint is None:
            raise UserError(f'{prefix} training ended without iter_{max_iters}.pth in '
                            f'{run.train_dir}')
        done['trained'] = True
    for scale in pending:
        print(f'{prefix} evaluate at {scale:g}x', flush=True)
        command = _job('evaluate', config=run.row.train_config, checkpoint=str(checkpoint),
                       work_dir=str(run.eval_dir(scale)),
                       cfg_options=[*options.cfg_options, *scale_options(cfg, scale)])
        run_logged(command, logs / f'{run.row.row_id}_s{run.seed}_eval_{scale:g}x.log', prefix)
        done['evaluated'].append(scale)
    return done


def _run_spectrum(run: Run, options: StudyOptions) -> None:
    out = run.root / 'spectrum'
    if (out / 'spectrum.json').is_file():
        return
    cfg = load_config(run.row.train_config, cfg_options=parsed_cfg_options(options.cfg_options))
    checkpoint = final_checkpoint(run, cfg.train_cfg.max_iters)
    if checkpoint is None:
        print(f'  no final checkpoint of {run.name}: no spectrum', flush=True)
        return
    command = _job('spectrum', config=run.row.train_config, checkpoint=str(checkpoint),
                   out_dir=str(out), cfg_options=options.cfg_options,
                   num_images=options.spectrum_images)
    print(f'  spectrum of {run.name}', flush=True)
    run_logged(command, options.work_dir / 'logs' / f'{run.row.row_id}_spectrum.log', '  ')


def cost_files(options: StudyOptions) -> dict[str, Path]:
    costs = options.work_dir / 'costs'
    return dict(dir=costs, bench_csv=costs / 'bench' / 'models_cpu.csv',
                bench_done=costs / 'bench' / 'configs.json')


def _count_flops(rows, options: StudyOptions) -> None:
    for row in rows:
        out = cost_files(options)['dir'] / f'flops_{row.row_id}'
        if out.with_suffix('.json').is_file():
            continue
        print(f'  FLOPs of {row.row_id}', flush=True)
        run_logged(_job('flops', config=cost_config_of(row, options.work_dir, options.cost_config),
                        out=str(out), shape=options.cost_shape),
                   options.work_dir / 'logs' / f'{row.row_id}_flops.log', '  ')


def pending_benchmark(rows, options: StudyOptions) -> list[str]:
    """The cost configs the step-time benchmark still has to measure side by side (rows over
    ``bench_max_params_m`` by their FLOP count left out); empty when they were, all together.
    Once measured, write them as JSON to ``cost_files(options)['bench_done']``."""
    files = cost_files(options)
    configs = []
    for row in rows:
        flops = files['dir'] / f'flops_{row.row_id}.json'
        params = json.loads(flops.read_text())['summary']['params_m'] if flops.is_file() else 0
        if options.bench_max_params_m is not None and params > options.bench_max_params_m:
            print(f'  {row.row_id}: {params:.0f} M parameters, over --bench-max-params; '
                  'not benchmarked', flush=True)
            continue
        configs.append(cost_config_of(row, options.work_dir, options.cost_config))
    marker = files['bench_done']
    return [] if marker.is_file() and json.loads(marker.read_text()) == configs else configs


def train_source(source: Run, options: StudyOptions) -> None:
    """Train and evaluate the transplant's source unless done; ``options.load_from`` becomes its
    final checkpoint. A failure stops the study: every row starts from it."""
    own = source_options(options)
    _run_one(source, 0, 0, own, own.eval_scales)
    options.load_from = final_checkpoint(source, max_iters_of(source, own))
    if options.load_from is None:
        raise UserError(f'{source.name}: not trained (--no-train?); the transplant rows start '
                        f'from its final checkpoint in {source.train_dir}')


def run_study(rows, runs: list[Run], options: StudyOptions, source: Run | None = None) -> dict:
    """Run everything not yet done (the transplant ``source`` first); returns counts of what was
    trained / evaluated / skipped."""
    counts = dict(trained=0, evaluated=0, skipped=0)
    started = time.monotonic()
    if source is not None and options.runs:
        train_source(source, options)
    # First every run at the headline scale, then the other scales: an interrupted study
    # has its main column complete first.
    for phase, scales in enumerate((options.eval_scales[:1], options.eval_scales[1:])):
        for index, run in enumerate(runs if options.runs and scales else [], 1):
            try:
                done = _run_one(run, index, len(runs), options, scales)
            except UserError as error:  # one broken run must not stop the others
                print(f'FAILED: {error}', flush=True)
                counts['failed'] = counts.get('failed', 0) + 1
                continue
            counts['evaluated'] += len(done['evaluated'])
            if phase:
                continue
            counts['trained'] += done['trained']
            counts['skipped'] += not (done['trained'] or done['evaluated'])
            elapsed, worked = time.monotonic() - started, index - counts['skipped']
            if worked and index < len(runs):
                eta = elapsed / worked * (len(runs) - index)
                print(f'  {index}/{len(runs)} runs done, {elapsed / 60:.1f} min so far, '
                      f'at most ~{eta / 60:.0f} min to go', flush=True)
    for run in runs if options.spectrum else []:
        if run.seed == options.seeds[0]:  # a row's first seed
            _run_spectrum(run, options)
    if options.costs:
        _count_flops(rows, options)
    return counts
