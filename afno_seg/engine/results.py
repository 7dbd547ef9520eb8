"""A run's last lines say where its results are on disk (mmseg's log, hundreds of lines up)."""
import numbers
import os
import os.path as osp
from pathlib import Path

from mmengine.dist import is_main_process
from mmengine.runner import Runner

__all__ = ['print_results', 'test_results', 'train_results']


def _metrics(metrics: dict) -> str:
    # numbers.Real: NumPy scalars too (mmseg's IoUMetric gives float32); not the loop's timings
    return ', '.join(f'{key} {float(value):.4g}' for key, value in metrics.items()
                     if isinstance(value, numbers.Real) and key not in ('time', 'data_time'))


def train_results(runner: Runner) -> list[tuple[str, str]]:
    """(what, where) after training: checkpoints, last validation metrics, config, log."""
    rows, hub = [], runner.message_hub
    if osp.isfile(last := osp.join(runner.work_dir, 'last_checkpoint')):
        rows.append(('checkpoint', Path(last).read_text().strip()))
    if best := hub.get_info('best_ckpt'):
        score = hub.get_info('best_score')
        rows.append(('best', best + (f' ({score:.4g})' if isinstance(score, float) else '')))
    if metrics := _metrics({key[len('val/'):]: value.current()
                            for key, value in hub.log_scalars.items() if key.startswith('val/')}):
        rows.append(('validation', f'{metrics} (iteration {runner.iter})'))
    if osp.isfile(config := osp.join(runner.work_dir, osp.basename(runner.cfg.filename or ''))):
        rows.append(('config', config))
    return rows + [('log', osp.join(runner.log_dir, f'{runner.timestamp}.log'))]


def test_results(runner: Runner, metrics: dict | None) -> list[tuple[str, str]]:
    """(what, where) after a test: metrics, their JSON, evaluators' outputs, painted images, log."""
    rows = [('metrics', _metrics(metrics))] if _metrics(metrics or {}) else []
    if osp.isfile(json_file := osp.join(runner.log_dir, f'{runner.timestamp}.json')):
        rows.append(('metrics json', json_file))
    evaluators = runner.cfg.get('test_evaluator') or []
    for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
        out_dir, folder = evaluator.get('out_dir'), evaluator.get('output_dir')
        if out_dir and osp.isfile(report := osp.join(out_dir, 'report.html')):
            rows.append(('report', report))
        elif folder and osp.isdir(folder):
            what = 'test-server PNGs' if evaluator.get('format_only') else 'predictions'
            rows.append((what, f'{folder} ({len(os.listdir(folder))} files)'))
    save_dir = (runner.cfg.get('visualizer') or {}).get('save_dir') or runner.log_dir
    if osp.isdir(painted := osp.join(save_dir, 'vis_data', 'vis_image')):
        rows.append(('painted images', painted))
    return rows + [('log', osp.join(runner.log_dir, f'{runner.timestamp}.log'))]


def print_results(rows: list[tuple[str, str]]) -> None:
    """The rows as the run's last lines on the main process's stdout, paths relative to cwd."""
    if is_main_process():
        cwd, width = os.getcwd() + os.sep, max(len(what) for what, _ in rows)
        print('results:\n' + '\n'.join(f'  {what:<{width}}  {where.replace(cwd, "")}'
                                        for what, where in rows), flush=True)
