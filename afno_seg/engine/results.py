"""The last lines of a training or test run: where its results are.

mmseg's log says everything on the way, in hundreds of lines; the terminal's last lines say where
the checkpoint, the metrics, the predictions and the log now are (only what was really written,
each at the path it has on disk; mmseg's ``CityscapesMetric`` logs the parent of its
``output_dir``). Printed to stdout only, on the main process: the log file stays mmseg's.
"""
import numbers
import os
import os.path as osp

from mmengine.dist import is_main_process
from mmengine.runner import Runner

__all__ = ['print_results', 'test_results', 'train_results']

# Timing scalars the loops log beside the metrics.
_NOT_METRICS = ('time', 'data_time')


def _metrics_text(metrics: dict) -> str:
    # numbers.Real: NumPy scalars too (mmseg's IoUMetric gives float32)
    return ', '.join(f'{key} {float(value):.4g}' for key, value in metrics.items()
                     if isinstance(value, numbers.Real) and key not in _NOT_METRICS)


def _log_file(runner: Runner) -> str:
    return osp.join(runner.log_dir, f'{runner.timestamp}.log')


def train_results(runner: Runner) -> list[tuple[str, str]]:
    """(what, where) of a finished training: the checkpoint ``last_checkpoint`` names (what
    ``--resume`` continues from), the best one when the config keeps it, the last validation
    metrics, the config as run, the log."""
    rows = []
    last = osp.join(runner.work_dir, 'last_checkpoint')
    if osp.isfile(last):
        with open(last) as f:
            rows.append(('checkpoint', f.read().strip()))
    hub = runner.message_hub
    best, score = hub.get_info('best_ckpt'), hub.get_info('best_score')
    if best:
        rows.append(('best', best + (f' ({score:.4g})' if isinstance(score, float) else '')))
    metrics = {key[len('val/'):]: scalar.current() for key, scalar in hub.log_scalars.items()
               if key.startswith('val/')}
    if _metrics_text(metrics):
        rows.append(('validation', f'{_metrics_text(metrics)} (iteration {runner.iter})'))
    config = osp.join(runner.work_dir, osp.basename(runner.cfg.filename or ''))
    if runner.cfg.filename and osp.isfile(config):
        rows.append(('config', config))
    rows.append(('log', _log_file(runner)))
    return rows


def test_results(runner: Runner, metrics: dict | None) -> list[tuple[str, str]]:
    """(what, where) of a finished test: the metrics and their JSON, each evaluator's output
    folder (``--out``, ``--format-only``) or report (``--report``), the painted images
    (``--show-dir``), the log."""
    rows = []
    if _metrics_text(metrics or {}):
        rows.append(('metrics', _metrics_text(metrics)))
    json_file = osp.join(runner.log_dir, f'{runner.timestamp}.json')
    if osp.isfile(json_file):
        rows.append(('metrics json', json_file))
    evaluators = runner.cfg.get('test_evaluator') or []
    for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
        report = osp.join(evaluator.get('out_dir') or '', 'report.html')
        folder = evaluator.get('output_dir')
        if evaluator.get('out_dir') and osp.isfile(report):
            rows.append(('report', report))
        elif folder and osp.isdir(folder):
            what = 'test-server PNGs' if evaluator.get('format_only') else 'predictions'
            rows.append((what, f'{folder} ({len(os.listdir(folder))} files)'))
    save_dir = (runner.cfg.get('visualizer') or {}).get('save_dir') or runner.log_dir
    painted = osp.join(save_dir, 'vis_data', 'vis_image')
    if osp.isdir(painted):
        rows.append(('painted images', painted))
    rows.append(('log', _log_file(runner)))
    return rows


def print_results(rows: list[tuple[str, str]]) -> None:
    """The rows as the run's last lines (the main process only); paths inside the working
    directory as relative ones (mmengine makes the work_dir absolute)."""
    if not is_main_process():
        return
    cwd = os.getcwd() + os.sep
    width = max(len(what) for what, _ in rows)
    print('results:\n' + '\n'.join(f'  {what:<{width}}  {where.replace(cwd, "")}'
                                    for what, where in rows), flush=True)
