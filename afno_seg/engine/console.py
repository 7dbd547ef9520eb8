"""A run's console: header, progress, warnings, results; other library INFO in the log file only."""
import inspect
import logging
import os
import os.path as osp
import sys
from contextvars import ContextVar

import torch
from mmengine.logging import MessageHub, print_log

__all__ = ['ConsoleFilter', 'VERBOSE', 'print_header', 'quiet_console']

VERBOSE: ContextVar[bool] = ContextVar('afno_seg_verbose', default=False)  # the tools' --verbose
LIBRARIES = ('mmengine', 'mmcv', 'mmseg', 'mmpretrain', 'mmdet')
HOOKS, METRICS = f'{os.sep}mmengine{os.sep}hooks{os.sep}', f'{os.sep}evaluation{os.sep}'
# Dropped, warnings too: what the header says, mmengine's notices about its own calls
DROPPED_PREFIXES = ('Exp name:', 'Checkpoints will be saved to', '"FileClient" will be deprecated',
                    '"HardDiskBackend" is the alias', 'The prefix is not set in metric class')
_RELAYS = {logging.__file__, print_log.__code__.co_filename, __file__}


class ConsoleFilter(logging.Filter):
    """Keep warnings and other code's records; of the OpenMMLab libraries' INFO records: their
    hooks' (progress, checkpoints), a resume's, a test's metric tables (in training: progress)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(DROPPED_PREFIXES):
            return False
        if record.levelno >= logging.WARNING or message.startswith('resumed epoch'):
            return True
        origin = record.pathname
        if origin == print_log.__code__.co_filename:  # print_log's records: its caller's file
            frame = inspect.currentframe()
            while frame is not None and frame.f_code.co_filename in _RELAYS:
                frame = frame.f_back
            origin = frame.f_code.co_filename if frame is not None else ''
        libraries = tuple(osp.dirname(module.__file__) + os.sep for name in LIBRARIES
                          if getattr(module := sys.modules.get(name), '__file__', None))
        return not origin.startswith(libraries) or HOOKS in origin or (
            METRICS in origin and MessageHub.get_current_instance().get_info('iter') is None)


def quiet_console(logger: logging.Logger) -> logging.Logger:
    """``logger`` with a :class:`ConsoleFilter` on its terminal handler, unless ``--verbose``."""
    for handler in () if VERBOSE.get() else logger.handlers:
        if type(handler) is logging.StreamHandler:  # not its FileHandler, a subclass
            handler.addFilter(ConsoleFilter())
    return logger


def print_header(runner, what: str, precision: str) -> None:
    """A run's first lines, in its log file too: ``what`` (train, test), the config and the rest."""
    threads, world = torch.get_num_threads(), runner.world_size
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else \
        f'cpu ({threads} thread{"s" * (threads > 1)})'
    log = osp.join(runner.log_dir, f'{runner.timestamp}.log') + ('' if VERBOSE.get() else
        " (with mmengine's environment, config and hooks; --verbose prints them here)")
    text = (f'{what} {runner.cfg.filename}\n  work dir   {runner.work_dir}\n  log file   {log}\n'
            f'  precision  {precision}\n  devices    {device} x {world} '
            f'process{"es" * (world > 1)} (launcher {runner.launcher})')
    print_log(text.replace(os.getcwd() + os.sep, ''), logger='current')
