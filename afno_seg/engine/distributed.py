"""Distributed runs on CPUs (gloo), with nothing changed on GPUs, and one line when a rank dies.

mmengine 0.10.7's ``init_dist('pytorch')`` and ``init_dist('slurm')`` call
``torch.cuda.set_device`` unconditionally ("Found no NVIDIA driver" on a CPU node), so without CUDA
:func:`init_cpu_process_group` starts the gloo group before the Runner is built (which then skips
its own ``init_dist``); for ``--launcher slurm`` it first turns the task's Slurm variables into
torch's (:func:`slurm_rendezvous_environment`). When a rank dies (OOM killer, a node failure) the
others fail in their next collective, naming an address, not a rank, or only after the collective
timeout when it hangs; :func:`explain_collective_failure` names the ranks no longer running,
from the hosts and process ids :func:`record_peers` gathered (docs/reliability.md, "Dead ranks").
"""
import datetime
import os
import socket
import subprocess
import time

import torch.distributed as dist
from mmengine.dist import all_gather_object, get_rank, get_world_size

from .errors import UserError, error_chain

__all__ = ['DEFAULT_COLLECTIVE_TIMEOUT_S', 'explain_collective_failure', 'init_cpu_process_group',
           'process_running', 'record_peers', 'slurm_rendezvous_environment']

DEFAULT_COLLECTIVE_TIMEOUT_S = 1800
# --launcher slurm without MASTER_PORT: a port from the job id, so that two jobs sharing a node do
# not both bind torch's default 29500 ("address already in use"); a requeued job keeps its id.
SLURM_BASE_PORT, SLURM_PORT_SPAN = 29500, 1000
PEER_EXIT_WAIT_S = 3.0
# Fragments of the errors gloo, NCCL and c10d raise when a peer is gone or silent.
_PEER_FAILURE_MARKERS = ('gloo', 'NCCL', 'ProcessGroup', 'c10d', 'Connection reset by peer',
                         'Connection closed by peer')

_peers: list[tuple[str, int]] = []  # (host, pid) of every rank, by rank


def slurm_rendezvous_environment(port: int | None = None) -> dict[str, str]:
    """torch's ``env://`` variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) for
    this task of an ``srun`` step, from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the step's
    first node. MASTER_ADDR and MASTER_PORT already set win (as in mmengine's slurm start);
    ``port`` (``env_cfg.dist_cfg.port``) wins over both; without either the port is
    ``29500 + SLURM_JOB_ID % 1000``."""
    missing = [k for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_JOB_ID') if k not in os.environ]
    if missing:
        raise UserError(f'--launcher slurm needs the environment srun gives its tasks; missing '
                        f'{missing}. Start with tools/slurm_train.sh or srun.')
    nodes = os.environ.get('SLURM_STEP_NODELIST') or os.environ.get('SLURM_NODELIST', '')
    address = os.environ.get('MASTER_ADDR') or _first_host(nodes)
    if port is None:
        port = os.environ.get('MASTER_PORT') or \
            SLURM_BASE_PORT + int(os.environ['SLURM_JOB_ID']) % SLURM_PORT_SPAN
    return dict(RANK=os.environ['SLURM_PROCID'], WORLD_SIZE=os.environ['SLURM_NTASKS'],
                LOCAL_RANK=os.environ.get('SLURM_LOCALID', '0'), MASTER_ADDR=address,
                MASTER_PORT=str(port))


def _first_host(nodes: str) -> str:
    """The first host of a Slurm node list (``node[01-04],gpu7``): Slurm's own expansion."""
    if not any(c in nodes for c in '[,'):
        return nodes or '127.0.0.1'
    hosts = subprocess.run(['scontrol', 'show', 'hostnames', nodes], capture_output=True,
                           text=True, check=True).stdout.split()
    return hosts[0]


def init_cpu_process_group(timeout_s: float | None = None, launcher: str = 'pytorch',
                           port: int | None = None) -> None:
    """Join the gloo process group that ``torchrun`` describes in RANK/WORLD_SIZE/MASTER_*, or
    with ``launcher='slurm'`` the one of this ``srun`` step (:func:`slurm_rendezvous_environment`,
    ``port`` passed on); ``timeout_s``: how long a collective waits for a silent peer before it
    fails, in seconds as mmengine's ``env_cfg.dist_cfg.timeout`` (None:
    :data:`DEFAULT_COLLECTIVE_TIMEOUT_S`)."""
    if dist.is_initialized():
        return
    if launcher == 'slurm':
        # Into os.environ, as mmengine's own slurm start does: env:// reads it, and mmengine's
        # get_local_rank reads LOCAL_RANK.
        os.environ.update(slurm_rendezvous_environment(port))
    missing = [k for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')
               if k not in os.environ]
    if missing:
        raise UserError(f'--launcher pytorch needs torchrun\'s environment; missing {missing}. '
                        'Start with tools/dist_train.sh or torchrun.')
    timeout = datetime.timedelta(seconds=timeout_s or DEFAULT_COLLECTIVE_TIMEOUT_S)
    store, rank, world_size = next(dist.rendezvous('env://', timeout=timeout))
    # torchrun keeps one store across restarts: without a prefix per attempt, a restarted group
    # reads the gloo addresses of the processes it replaced ("connectFullMesh failed ...
    # Connection refused", measured with torch 2.14, static and c10d rendezvous alike).
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    store = dist.PrefixStore(f'afno_seg/attempt_{attempt}/', store)
    dist.init_process_group('gloo', store=store, rank=rank, world_size=world_size,
                            timeout=timeout)


def record_peers() -> None:
    """Gather every rank's (host, pid) for :func:`explain_collective_failure` (one collective)."""
    global _peers
    if get_world_size() > 1:
        _peers = [tuple(peer) for peer in all_gather_object((socket.gethostname(), os.getpid()))]


def process_running(pid: int) -> bool:
    """True unless ``pid`` is gone or a zombie (dead, not yet reaped by its parent)."""
    try:
        with open(f'/proc/{pid}/stat') as file:
            return file.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except (OSError, IndexError):  # no /proc (macOS): only whether it exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, owned by someone else
            return True
        return True


def _stopped_ranks(candidates: list[tuple[int, int]], wait_s: float) -> list[tuple[int, int]]:
    """The (rank, pid) of ``candidates`` no longer running, waiting up to ``wait_s`` seconds:
    a killed process closes its sockets (which fails our collective) a moment before it dies."""
    deadline = time.monotonic() + wait_s
    while True:
        stopped = [(rank, pid) for rank, pid in candidates if not process_running(pid)]
        if stopped or time.monotonic() >= deadline:
            return stopped
        time.sleep(0.05)


def _short_cause(text: str) -> str:
    """The first line of a backend error without gloo's source location and advice."""
    line = text.splitlines()[0]
    line = line.split('] ', 1)[1] if line.count('[') and '] ' in line else line
    return line.split('. This is typically caused', 1)[0].strip()[:200]


def explain_collective_failure(error: BaseException, iteration: int | None = None) -> str | None:
    """One line for an error a collective raised because a peer died or hung (in ``iteration``,
    if known), else None."""
    if get_world_size() == 1:
        return None
    text = '\n'.join(f'{type(cause).__name__}: {cause}' for cause in error_chain(error))
    if not (isinstance(error, getattr(dist, 'DistError', ()))
            or any(marker in text for marker in _PEER_FAILURE_MARKERS)):
        return None
    rank, host = get_rank(), socket.gethostname()
    where = f' in iteration {iteration}' if iteration is not None else ''
    here = [(r, pid) for r, (peer_host, pid) in enumerate(_peers)
            if peer_host == host and r != rank]
    dead = [f'rank {r} (pid {pid})' for r, pid in _stopped_ranks(here, PEER_EXIT_WAIT_S)]
    elsewhere = len(_peers) - 1 - len(here)
    if dead:
        verdict = f'{", ".join(dead)} {"is" if len(dead) == 1 else "are"} no longer running'
    elif len(here) == 1 and not elsewhere:
        verdict = (f'rank {here[0][0]} (pid {here[0][1]}) is still running but did not answer: '
                   'it hung (stopped, or stuck in I/O or a deadlock)')
    elif _peers:
        verdict = ('every other rank on this host is still running, so a rank on another host '
                   f'({elsewhere} there) died or hung' if elsewhere else
                   'every other rank is still running: one of them hung')
    else:
        verdict = 'another rank died or hung'
    return (f'rank {rank}: a collective operation with the other ranks failed{where} '
            f'({_short_cause(text)}): {verdict}. Training cannot go on without it. With torchrun '
            'restarts (MAX_RESTARTS=N bash tools/dist_train.sh ...) the group restarts and '
            'resumes from last_checkpoint; otherwise continue with --resume.')
