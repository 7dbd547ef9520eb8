"""Distributed runs on CPUs (gloo) under torchrun or Slurm (mmengine 0.10.7's ``init_dist`` needs
CUDA), and one line naming a rank that died (torch names an address). docs/reliability.md."""
import datetime
import os
import socket
import subprocess
import time

import torch.distributed as dist
from mmengine.dist import all_gather_object, get_rank, get_world_size

from .errors import UserError

__all__ = ['explain_collective_failure', 'init_cpu_process_group', 'process_running',
           'record_peers', 'slurm_rendezvous_environment']

PEER_EXIT_WAIT_S = 3.0  # a killed peer's sockets close (failing our collective) before it is gone
_peers: list[tuple[str, int]] = []  # (host, pid) of every rank, by rank


def slurm_rendezvous_environment(port: int | None = None) -> dict[str, str]:
    """torch's ``env://`` variables for this ``srun`` task; MASTER_ADDR: the step's first node; the
    port: ``port``, MASTER_PORT, else 29500 + job id % 1000 (two jobs on a node bind two)."""
    missing = [k for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_JOB_ID') if k not in os.environ]
    if missing:
        raise UserError(f'--launcher slurm needs the environment srun gives its tasks; missing '
                        f'{missing}. Start with tools/slurm_train.sh or srun.')
    nodes = os.environ.get('SLURM_STEP_NODELIST') or os.environ.get('SLURM_NODELIST', '')
    address = os.environ.get('MASTER_ADDR') or nodes or '127.0.0.1'
    if address == nodes and any(c in nodes for c in '[,'):  # node[01-04],gpu7: Slurm expands
        try:
            address = subprocess.run(['scontrol', 'show', 'hostnames', nodes], capture_output=True,
                                     text=True, check=True).stdout.split()[0]
        except (OSError, subprocess.CalledProcessError, IndexError) as error:
            detail = (getattr(error, 'stderr', '') or '').strip() or (
                'no output' if isinstance(error, IndexError) else str(error))
            raise UserError(f'--launcher slurm: cannot expand the node list {nodes} with `scontrol '
                            f'show hostnames` ({detail.splitlines()[-1]}); set MASTER_ADDR to the '
                            'first node of the step') from None
    if port is None:
        port = os.environ.get('MASTER_PORT') or 29500 + int(os.environ['SLURM_JOB_ID']) % 1000
    return dict(RANK=os.environ['SLURM_PROCID'], WORLD_SIZE=os.environ['SLURM_NTASKS'],
                LOCAL_RANK=os.environ.get('SLURM_LOCALID', '0'), MASTER_ADDR=address,
                MASTER_PORT=str(port))


def init_cpu_process_group(timeout_s: float | None = None, launcher: str = 'pytorch',
                           port: int | None = None) -> None:
    """Join the gloo group of torchrun's RANK/WORLD_SIZE/MASTER_* or (``launcher='slurm'``) this
    ``srun`` step; ``timeout_s``: a collective's wait for a silent peer (None: 1800, mmengine's)."""
    if dist.is_initialized():
        return
    if launcher == 'slurm':  # into os.environ, as mmengine's slurm start (get_local_rank reads it)
        os.environ.update(slurm_rendezvous_environment(port))
    timeout = datetime.timedelta(seconds=timeout_s or 1800)
    store, rank, world_size = next(dist.rendezvous('env://', timeout=timeout))
    # torchrun keeps one store across restarts: without a prefix per attempt, a restarted group
    # reads the gloo addresses of the processes it replaced (measured with torch 2.14).
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    dist.init_process_group('gloo', store=dist.PrefixStore(f'afno_seg/attempt_{attempt}/', store),
                            rank=rank, world_size=world_size, timeout=timeout)


def record_peers() -> None:
    """Gather every rank's (host, pid) for :func:`explain_collective_failure` (one collective)."""
    global _peers
    if get_world_size() > 1:
        _peers = [tuple(peer) for peer in all_gather_object((socket.gethostname(), os.getpid()))]


def process_running(pid: int) -> bool:
    """False when ``pid`` is gone or a zombie (dead, not yet reaped by its parent); Linux."""
    try:
        with open(f'/proc/{pid}/stat') as file:
            return file.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except OSError:
        return False


def explain_collective_failure(error: BaseException, iteration: int | None = None) -> str | None:
    """One line naming the ranks on this host no longer running when ``error`` is a ``DistError``
    or gloo's plain ``RuntimeError`` from a collective (in ``iteration``, if known); a ``DistError``
    with none dead here blames the other hosts; else None (a hung rank: torch's timeout error)."""
    cause = error  # it, or what it was raised from or during
    while cause is not None and not isinstance(cause, dist.DistError) \
            and type(cause) is not RuntimeError:
        cause = cause.__cause__ or cause.__context__
    if get_world_size() == 1 or not _peers or cause is None:
        return None
    rank, host = get_rank(), socket.gethostname()
    here = [(r, pid) for r, (peer_host, pid) in enumerate(_peers)
            if peer_host == host and r != rank]
    deadline = time.monotonic() + PEER_EXIT_WAIT_S
    while True:
        dead = [(r, pid) for r, pid in here if not process_running(pid)]
        if dead or not here or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not dead and not isinstance(cause, dist.DistError):
        return None
    verdict = (', '.join(f'rank {r} (pid {pid})' for r, pid in dead)
               + (' is' if len(dead) == 1 else ' are') + ' no longer running' if dead else
               'every other rank on this host is still running: one of them hung, or a rank on '
               'another host died or hung')
    where = f' in iteration {iteration}' if iteration is not None else ''
    return (f'rank {rank}: a collective operation with the other ranks failed{where} '
            f'({type(cause).__name__} in {dist.get_backend()}): {verdict}. Training cannot go '
            'on without it. With torchrun restarts (MAX_RESTARTS=N bash tools/dist_train.sh ...) '
            'the group restarts and resumes from last_checkpoint; else continue with --resume.')
