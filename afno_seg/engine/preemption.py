"""Stop signals: finish the iteration, checkpoint, exit; a second signal exits at once.

Clusters end jobs with a signal (Slurm's SIGTERM at pre-emption or the time limit, SIGUSR1 with
``--signal=USR1@T``; torchrun forwards SIGTERM; Ctrl-C is SIGINT), and Python's defaults kill the
run mid-iteration, losing everything since the last periodic checkpoint. :class:`StopSignals`
only records the first signal; :class:`~.checkpoint_hook.AtomicCheckpointHook` acts on it after
the iteration (checkpoint, :class:`TrainingInterrupted`, exit status
:data:`INTERRUPTED_EXIT_CODE`). A second signal exits at once with status ``128 + signal``, from a
watcher thread, so also while the main thread is blocked in C code (a checkpoint write, a
collective). Slurm signals every process of a step and torchrun forwards what it receives, so
signals within :data:`SAME_EVENT_WINDOW_S` of the first count as the same event.
"""
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress

__all__ = ['INTERRUPTED_EXIT_CODE', 'SAME_EVENT_WINDOW_S', 'StopSignals', 'TrainingInterrupted',
           'installed_stop_signals', 'restart_count', 'stop_signals_released']

# sysexits.h EX_TEMPFAIL ("temporary failure; the user is invited to retry"): what a requeue
# wrapper (tools/slurm_train.sh) looks for.
INTERRUPTED_EXIT_CODE = 75
SAME_EVENT_WINDOW_S = 1.0
DEFAULT_SIGNALS = ('SIGTERM', 'SIGINT', 'SIGUSR1')


class TrainingInterrupted(Exception):
    """Training stopped on ``signal_name`` after ``iteration``, saved in ``checkpoint`` (None when
    none was written)."""
    exit_code = INTERRUPTED_EXIT_CODE  # what a tool exits with (run_tool)

    def __init__(self, signal_name: str, iteration: int, checkpoint: str | None) -> None:
        self.signal_name, self.iteration, self.checkpoint = signal_name, iteration, checkpoint
        saved = (f'checkpoint {checkpoint} written' if checkpoint else 'no checkpoint written')
        super().__init__(f'{signal_name}: training stopped after iteration {iteration}, {saved}')


def _to_signal(name: str | int) -> signal.Signals:
    try:
        return signal.Signals(name) if isinstance(name, int) else signal.Signals[name.upper()]
    except (KeyError, ValueError):
        raise ValueError(f'unknown signal {name!r}; use names such as SIGTERM, SIGINT, '
                         'SIGUSR1') from None


class StopSignals:
    """Record the first stop signal; exit at once on a later one.

    One instance is installed at a time: installing another uninstalls the first (a run that
    ended with an exception before it could uninstall leaves no handlers behind).

    Args:
        signals (Sequence[str | int]): Signals that ask for a stop. Default: SIGTERM, SIGINT,
            SIGUSR1.
        describe_state (Callable[[], str] | None): Called (from the watcher thread) for the
            message of an immediate exit, e.g. what ``last_checkpoint`` names. Default: None.
    """

    def __init__(self, signals: Sequence[str | int] = DEFAULT_SIGNALS,
                 describe_state: Callable[[], str] | None = None) -> None:
        self.signals = [_to_signal(name) for name in signals]
        self.describe_state = describe_state
        self.received: signal.Signals | None = None
        self._first_at: float | None = None  # when the watcher saw the first delivery
        self._previous_handlers: dict = {}
        self._previous_wakeup_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    @property
    def installed(self) -> bool:
        return self._pipe is not None

    def __enter__(self) -> 'StopSignals':
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> bool:
        """Install the handlers (main thread only; returns False elsewhere, changing nothing)."""
        if self.installed or not self.signals:
            return self.installed
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = installed_stop_signals()
        if previous is not None:
            previous.uninstall()
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        for number in self.signals:
            # Python's C-level handler writes the number to the wakeup pipe, which the watcher
            # reads even while the main thread is busy in C code; the Python-level one runs in
            # the main thread at the next bytecode, so a signal a process sends itself is
            # recorded before its next line runs.
            self._previous_handlers[number] = signal.signal(number, self._record)
        self._previous_wakeup_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._pipe = (read_end, write_end)
        self._thread = threading.Thread(target=self._watch, args=(read_end, ),
                                        name='afno_seg-stop-signals', daemon=True)
        self._thread.start()
        return True

    def uninstall(self, ignore: bool = False) -> None:
        """Restore the previous handlers (main thread only); with ``ignore``, set ``SIG_IGN``
        instead, in one step (no moment with the fatal default): for a process about to exit after
        a failure, whose message a following SIGTERM (torchrun's) must not cut short."""
        if not self.installed:
            return
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        for number, handler in self._previous_handlers.items():
            signal.signal(number, signal.SIG_IGN if ignore else handler)
        self._previous_handlers = {}
        read_end, write_end = self._pipe
        self._pipe = None
        os.close(write_end)  # the watcher reads EOF and ends
        self._thread.join(timeout=5)
        os.close(read_end)

    def _watch(self, read_end: int) -> None:
        wanted = {int(number) for number in self.signals}
        with suppress(OSError):
            while data := os.read(read_end, 64):  # b'' once uninstall closes the write end
                for number in data:  # other signals with Python handlers (SIGCHLD) come here too
                    if number in wanted:
                        self._on_stop_signal(signal.Signals(number))

    def _record(self, signum, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)

    def _on_stop_signal(self, number: signal.Signals) -> None:
        """Each delivery, seen by the watcher thread: the first is recorded, a later one exits."""
        now = time.monotonic()
        if self._first_at is None:
            self._first_at = now
            if self.received is None:
                self.received = number
            return
        if now - self._first_at < SAME_EVENT_WINDOW_S:
            return  # a copy of the first event (see the module docstring)
        state = ''
        if self.describe_state is not None:
            with suppress(Exception):  # never let a report stop the exit
                state = ' ' + self.describe_state()
        message = (f'\nsecond stop signal ({number.name} after {self.received.name}): exiting '
                   f'now, without a checkpoint of the current iteration.{state}\n')
        try:
            os.write(2, message.encode())
        finally:
            os._exit(128 + int(number))


def installed_stop_signals() -> StopSignals | None:
    """The installed :class:`StopSignals`, if any, read from the process's signal table (whose
    handler is its ``_record``): the one record of what is installed, so no copy can go stale."""
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):  # not a signal Python can handle
            continue
        owner = getattr(handler, '__self__', None)
        if isinstance(owner, StopSignals) and owner.installed:
            return owner
    return None


@contextmanager
def stop_signals_released(ignore_on_error: bool = False) -> Iterator[None]:
    """Around training: the installed :class:`StopSignals` (the checkpoint hook's) is
    uninstalled however the block ends (mmengine calls no hook when training raises); when it
    raises and ``ignore_on_error``, with ``ignore`` (:meth:`StopSignals.uninstall`)."""
    failed = True
    try:
        yield
        failed = False
    finally:
        installed = installed_stop_signals()
        if installed is not None:
            installed.uninstall(ignore=ignore_on_error and failed)


def restart_count() -> tuple[str, int] | None:
    """``('torchrun', n)`` / ``('Slurm', n)`` when this process is the n-th restart (n >= 1)."""
    for launcher, variable in (('torchrun', 'TORCHELASTIC_RESTART_COUNT'),
                               ('Slurm', 'SLURM_RESTART_COUNT')):
        try:
            count = int(os.environ.get(variable, '0'))
        except ValueError:
            continue
        if count > 0:
            return launcher, count
    return None
