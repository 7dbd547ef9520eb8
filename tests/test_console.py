"""The console shows what matters; mmengine's dumps go to the log file only (``--verbose``: both).

A tools/train.py process (2 iterations, validation, ``persistent_workers`` with no workers): its
console is a header, the progress and the results block, no known warning; its log file has
mmengine's environment, config and hook table, and the per-class table (tools/test.py prints it:
tests/test_tools.py). tools/test.py on random bytes:
its one line within the first 10 lines of the output. The filter itself: in-process.

Cost: two tool processes (one of them refused before the Runner), about 20 s on 2 cores.
"""
import logging
import os
import re
from pathlib import Path

import mmengine
from mmengine.logging import MMLogger

from afno_seg.engine import load_config
from afno_seg.engine.console import VERBOSE, quiet_console
from afno_seg.engine.preflight import check_loaders

from conftest import TINY_CONFIG, check, cli_options, data_roots, run_tool

DUMPS = ('System environment:', 'Config:', 'Hooks will be executed in the following order')
NOISE = ('pkg_resources', 'build_loss', 'avg_non_ignore', 'worker processes', 'Traceback')


def test_training_console_is_a_header_progress_and_results(tiny_demo_data, tmp_path):
    work_dir = tmp_path / 'work'
    result = check(run_tool('tools/train.py', TINY_CONFIG, '--work-dir', str(work_dir),
                            *cli_options(data_roots(tiny_demo_data)), 'train_cfg.max_iters=2',
                            'train_cfg.val_interval=2', 'train_dataloader.persistent_workers=True'))
    out, lines = result.stdout, result.stdout.splitlines()
    assert not any(dump in out for dump in DUMPS), out[:3000]
    assert not any(noise in result.stderr for noise in NOISE), result.stderr[-3000:]
    header = next(i for i, line in enumerate(lines) if line.endswith(' train tests/configs/'
                                                                        'tiny_demo.py'))
    assert header < 5, out[:2000]
    rows = dict(re.split(' {2,}', line.strip(), maxsplit=1) for line in lines[header + 1:][:4])
    log = Path(rows['log file'].split(' (')[0])
    assert Path(rows['work dir']) == work_dir and log.is_file() and log.parent.parent == work_dir
    assert rows['precision'] == 'fp32'
    assert rows['devices'] == 'cpu (1 thread) x 1 process (launcher none)'
    assert 'train_dataloader: num_workers=0, so persistent_workers=False' in out
    assert re.findall(r'Iter\(train\) \[\s*(\d+)/2\]', out) == ['1', '2']
    assert re.search(r'Iter\(val\) \[4/4\] .*mIoU', out)  # the metrics: their table in the log
    assert lines[-1].startswith('  log ') and len(lines) < 30, out
    table = re.compile(r'^\|\s+road\s+\|', re.M)
    assert not table.search(out) and table.search(log.read_text())
    assert all(dump in log.read_text() for dump in DUMPS)  # the log file keeps mmengine's record


def test_test_tool_refuses_random_bytes_within_the_first_lines(tmp_path):
    bad = tmp_path / 'random.pth'
    bad.write_bytes(bytes(range(256)) * 64)
    result = run_tool('tools/test.py', TINY_CONFIG, str(bad), '--work-dir', str(tmp_path / 'w'))
    output = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 1 and len(output) <= 10, output[:20]
    assert any(f'{bad} (16384 bytes) is not a readable PyTorch checkpoint' in line
               for line in output), output


def test_cpu_loaders_get_at_most_one_worker_per_core(capsys):
    cores = len(os.sched_getaffinity(0))
    options = {f'{loader}_dataloader.num_workers': cores + 2 for loader in ('train', 'val')}
    for cuda in (False, True):
        cfg = load_config(TINY_CONFIG, cfg_options=options)
        check_loaders(cfg, ['train_dataloader', 'val_dataloader'], cuda=cuda)
        workers = {cfg.train_dataloader.num_workers, cfg.val_dataloader.num_workers}
        assert workers == ({cores + 2} if cuda else {cores})
    out = capsys.readouterr().out
    assert out.count(f'{cores} CPU cores here: train_dataloader.num_workers {cores + 2}, '
                     f'val_dataloader.num_workers {cores + 2} -> {cores}') == 1, out


def log_through(logger: logging.Logger, filename: str, message: str) -> None:
    """``logger.info(message)`` as code in ``filename`` calls it (its record's origin)."""
    exec(compile('logger.info(message)', filename, 'exec'), {'logger': logger, 'message': message})


def test_library_chatter_leaves_the_console_unless_verbose(tmp_path, capsys):
    library = str(Path(mmengine.__file__).parent / 'runner' / 'runner.py')
    hooks = str(Path(mmengine.__file__).parent / 'hooks' / 'logger_hook.py')
    for verbose in (False, True):
        token = VERBOSE.set(verbose)
        try:
            logger = quiet_console(MMLogger.get_instance(f'console_{verbose}', log_file=str(
                tmp_path / f'{verbose}.log')))
        finally:
            VERBOSE.reset(token)
        log_through(logger, library, 'Config: everything')
        log_through(logger, hooks, 'Iter(train) [1/2]')
        logger.warning('a warning from anywhere')
        logger.info('a message of the project or the user')
        out = capsys.readouterr().out
        assert ('Config: everything' in out) == verbose, out
        assert all(kept in out for kept in ('Iter(train) [1/2]', 'a warning', 'the project'))
        assert 'Config: everything' in (tmp_path / f'{verbose}.log').read_text()
