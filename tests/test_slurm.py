"""tools/slurm_train.sh on a real Slurm: the one-node cluster of tools/slurm_local_cluster.sh
(Debian's slurmctld, slurmd and munge, Slurm 22.05), started once by this module in a temporary
folder and stopped after it; docs/install.md's Slurm commands run as written on it, last.

The partition has no GPUs: 2 tasks, ``--launcher slurm``, gloo. An ``sbatch --requeue`` job runs
to completion; ``scancel --signal=USR1`` mid-run makes it checkpoint, exit 75 and requeue itself,
and the requeued job resumes and ends bitwise equal to the uninterrupted one; Slurm's time-limit
warning (``srun --signal=USR1@lead``) makes it save before Slurm kills it.

Without the packages (``.ci/run`` installs them as root) or without root the tests skip, saying
why; the cluster's settings are the script's (its header).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_doc_examples import SLURM_MARKER, marked_blocks, run_as_written
from test_preemption import MAX_ITERS, resumed_from, write_fault_config

from afno_seg.engine.checkpoint_hook import INTERRUPTED_EXIT_CODE
from afno_seg.engine.distributed import slurm_rendezvous_environment
from afno_seg.engine.errors import UserError

from conftest import (
    ROOT,
    assert_same_training_state,
    cli_options,
    complete_checkpoint_named_by,
    data_roots,
    read_checkpoint,
    seam_env,
)

DAEMONS = ('munged', 'slurmctld', 'slurmd')
CLIENTS = ('sbatch', 'srun', 'scontrol', 'scancel', 'sinfo', 'squeue')
JOB_TIMEOUT_S = 300

# A test seam (custom_imports): wait before an iteration until a stop signal has arrived, so the
# signal the test or Slurm sends lands at a known iteration however loaded the machine is.
SLURM_SEAMS = '''
import os, time
from pathlib import Path
from mmengine.hooks import Hook
from mmengine.registry import HOOKS
from afno_seg.engine.checkpoint_hook import StopSignals


@HOOKS.register_module()
class WaitForStopSignalHook(Hook):
    """In a run started from iteration 0: before iteration ``at``, write ``rank<R>.waiting``
    into ``folder``, then wait (at most ``timeout`` s) for a stop signal to be recorded."""

    def __init__(self, at, folder, timeout=240):
        self.at, self.folder, self.timeout = at, folder, timeout
        self.fresh = False

    def before_train(self, runner):
        self.fresh = runner.iter == 0

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if not self.fresh or runner.iter + 1 != self.at:
            return
        Path(self.folder, f"rank{os.environ.get('RANK', '0')}.waiting").touch()
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            stop = StopSignals.current
            if stop is not None and stop.received is not None:
                return
            time.sleep(0.05)
'''


class SlurmCluster:
    """tools/slurm_local_cluster.sh's cluster in ``folder`` (its ``AFNO_SEG_SLURM_DIR``); ``env``
    is what a client (sbatch, srun, scontrol) needs: the ``SLURM_CONF`` the script printed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env: dict[str, str] = {}

    def script(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(['bash', str(ROOT / 'tools' / 'slurm_local_cluster.sh'), command],
                              env={**os.environ, 'AFNO_SEG_SLURM_DIR': str(self.folder)},
                              capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        result = self.script('start')
        if result.returncode != 0:
            raise RuntimeError(result.stderr.strip()[-3000:])
        export = result.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r'export SLURM_CONF=\S+', export), result.stdout
        self.env = dict([export.removeprefix('export ').split('=', 1)])

    def client(self, *command: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(command, env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=60, check=check)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, Restarts, ExitCode, ...)."""
        text = self.client('scontrol', 'show', 'job', '-o', job_id, check=True).stdout
        return dict(field.split('=', 1) for field in text.split() if '=' in field)

    def wait_for_job(self, job_id: str, done, timeout: float = JOB_TIMEOUT_S) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if done(fields):
                return fields
            time.sleep(0.2)
        raise TimeoutError(f'job {job_id}: {fields}')

    def stop(self) -> None:
        """The script's stop: the jobs left cancelled, then the daemons stopped."""
        result = self.script('stop')
        assert result.returncode == 0, result.stderr


def which(tool: str) -> str | None:
    """``tool``'s path, the sbin folders included (a user's PATH often lacks them)."""
    return shutil.which(tool, path=os.pathsep.join([os.environ.get('PATH', ''), '/usr/sbin',
                                                    '/sbin']))


def why_no_slurm() -> str | None:
    missing = [tool for tool in DAEMONS + CLIENTS if which(tool) is None]
    if missing:
        return (f'Slurm is not installed (missing {", ".join(missing)}): as root, bash '
                'tools/slurm_local_cluster.sh start installs it (Debian), as .ci/run does')
    if os.geteuid() != 0:
        return 'the test cluster runs its daemons as root (SlurmUser=root); not root here'
    return None


@pytest.fixture(scope='module')
def slurm(tmp_path_factory):
    reason = why_no_slurm()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp('slurm'))
    try:
        cluster.start()
    except RuntimeError as error:
        cluster.stop()
        pytest.skip(f'the Slurm test cluster did not start: {error}')
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm):
    """The module's cluster for one test; a job that test leaves running is cancelled, so a
    failure does not keep the next test's job pending."""
    yield slurm
    slurm.client('scancel', '--user=root')


def write_slurm_config(folder: Path, *hooks: str) -> str:
    """tests/test_preemption.py's fault config (drop-path, dropout, RNG state, a checkpoint every
    2 iterations) with the seam above and ``hooks``."""
    (folder / 'slurm_seams.py').write_text(SLURM_SEAMS)
    return write_fault_config(
        folder,
        custom_imports="dict(imports=['afno_seg', 'reliability_seams', 'slurm_seams'], "
                       "allow_failed_imports=False)",
        custom_hooks='[' + ', '.join(["dict(type='RandomStateHook')", *hooks]) + ']',
        # the ranks agree on a signal every iteration (default 10): the runs are 8 long
        default_hooks="dict(checkpoint=dict(type='AtomicCheckpointHook', interval=2, "
                      "max_keep_ckpts=2, agree_every=1))")


def slurm_train_command(config: str, job_name: str, data_root, work_dir) -> list[str]:
    return ['bash', 'tools/slurm_train.sh', 'cpu', job_name, config, '--work-dir', str(work_dir),
            *cli_options(data_roots(data_root))]


def job_env(cluster: SlurmCluster, folder: Path, **variables: str) -> dict:
    """What the jobs inherit (sbatch and srun export the submitting environment): 2 tasks of 1
    CPU and no GPUs, this interpreter, the seams on PYTHONPATH."""
    env = {key: value for key, value in seam_env(folder).items()
           if not key.startswith('SLURM_')}
    return {**env, **cluster.env, 'PYTHON': sys.executable, 'GPUS': '2', 'GPUS_PER_NODE': '0',
            'CPUS_PER_TASK': '1', **variables}


def sbatch(cluster: SlurmCluster, command: list[str], env: dict, log: Path) -> str:
    """Submit ``command`` as a requeueable 2-task batch job; its output (every attempt) in
    ``log``. Returns the job id."""
    result = subprocess.run(['sbatch', '--parsable', '--requeue', '--ntasks=2', '--job-name=afno',
                             f'--chdir={ROOT}', f'--output={log}', '--open-mode=append',
                             f'--wrap={shlex.join(command)}'],
                            env=env, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip().split(';')[0]


def finished(fields: dict) -> bool:
    return fields['JobState'] in ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL')


@pytest.fixture(scope='module')
def uninterrupted_job(slurm, tiny_demo_data, tmp_path_factory):
    """``sbatch --requeue`` of slurm_train.sh on the fault config, never interrupted."""
    folder = tmp_path_factory.mktemp('slurm_reference')
    config = write_slurm_config(folder)
    log = folder / 'job.log'
    job_id = sbatch(slurm, slurm_train_command(config, 'afno', tiny_demo_data, folder / 'work'),
                    job_env(slurm, folder), log)
    fields = slurm.wait_for_job(job_id, finished)
    return folder / 'work', fields, log.read_text()


# --------------------------------------------------------------------------- without a cluster


def test_slurm_task_environment_becomes_torchs(monkeypatch):
    for name in ('MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('SLURM_PROCID', '3')
    monkeypatch.setenv('SLURM_NTASKS', '8')
    monkeypatch.setenv('SLURM_LOCALID', '1')
    monkeypatch.setenv('SLURM_JOB_ID', '123456')
    monkeypatch.setenv('SLURM_STEP_NODELIST', 'node7')
    assert slurm_rendezvous_environment() == dict(
        RANK='3', WORLD_SIZE='8', LOCAL_RANK='1', MASTER_ADDR='node7', MASTER_PORT='29956')
    monkeypatch.setenv('MASTER_PORT', '12345')
    assert slurm_rendezvous_environment()['MASTER_PORT'] == '12345'
    assert slurm_rendezvous_environment(port=23456)['MASTER_PORT'] == '23456'  # dist_cfg.port
    monkeypatch.delenv('SLURM_PROCID')
    with pytest.raises(UserError, match=r"--launcher slurm needs the environment srun gives its "
                                        r"tasks; missing \['SLURM_PROCID'\]"):
        slurm_rendezvous_environment()


def test_install_md_gives_the_slurm_commands_that_the_last_test_runs():
    """docs/install.md's Slurm block (the last test runs it as written) starts and stops the
    cluster with the script, and its sbatch appends across requeues into a log under work_dirs/."""
    blocks = marked_blocks(SLURM_MARKER)
    assert [where.split(':')[0] for where, _ in blocks] == ['docs/install.md'], blocks
    lines = blocks[0][1].replace('\\\n', ' ').splitlines()
    assert 'tools/slurm_local_cluster.sh start' in lines[0], lines[0]
    assert any(line.startswith('bash tools/slurm_local_cluster.sh stop') for line in lines)
    sbatch_words = next(shlex.split(line) for line in lines if line.startswith('sbatch '))
    assert {'--requeue', '--open-mode=append'} <= set(sbatch_words), sbatch_words
    output = [word for word in sbatch_words if word.startswith('--output=work_dirs/')]
    assert output and '%j' in output[0], sbatch_words


def test_a_slurm_log_written_where_sbatch_ran_is_ignored_by_git():
    if not (ROOT / '.git').exists() or shutil.which('git') is None:
        pytest.skip('not a git checkout (or no git): .gitignore is not in use')
    names = ['slurm-123.out', 'slurm-45_6.out', 'work_dirs/slurm/slurm-7.out']
    result = subprocess.run(['git', 'check-ignore', '--no-index', *names], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.stdout.split() == names, result.stdout + result.stderr


# --------------------------------------------------------------------------- on the cluster


@pytest.mark.slow
def test_sbatch_requeue_job_trains_to_completion_on_a_cpu_partition(slurm, uninterrupted_job):
    """2 tasks, no --gres, --launcher slurm with gloo: the job completes, checkpoint and log
    written (and ``srun -n2`` answers at all)."""
    assert slurm.client('srun', '-n2', 'hostname', check=True).stdout.count('\n') == 2
    work_dir, fields, output = uninterrupted_job
    assert (fields['JobState'], fields['ExitCode'], fields['Restarts']) == ('COMPLETED', '0:0',
                                                                            '0'), output[-4000:]
    assert 'Traceback' not in output
    run_log, = work_dir.glob('*/*.log')  # mmengine's record (the console may show less)
    record = run_log.read_text()
    assert 'Distributed launcher: slurm' in record and 'GPU number: 2' in record  # 2 ranks
    assert "backend='gloo'" in record  # the config as run
    assert complete_checkpoint_named_by(work_dir) == MAX_ITERS


@pytest.mark.slow
def test_scancel_usr1_checkpoints_exits_75_requeues_and_resumes_to_the_same_weights(
        cluster, uninterrupted_job, tiny_demo_data, tmp_path):
    """``scancel --signal=USR1`` before iteration 3: both tasks save iteration 3 and exit 75,
    slurm_train.sh runs ``scontrol requeue``, the requeued job (SLURM_RESTART_COUNT=1) resumes
    from iteration 3 by itself and ends bitwise equal to the uninterrupted job."""
    assert INTERRUPTED_EXIT_CODE == 75  # the documented status slurm_train.sh looks for
    markers = tmp_path / 'markers'
    markers.mkdir()
    config = write_slurm_config(
        tmp_path, f"dict(type='WaitForStopSignalHook', at=3, folder={str(markers)!r})")
    log = tmp_path / 'job.log'
    job_id = sbatch(cluster, slurm_train_command(config, 'afno', tiny_demo_data, tmp_path / 'work'),
                    job_env(cluster, tmp_path), log)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(list(markers.glob('rank*.waiting'))) < 2:
        assert time.monotonic() < deadline and not finished(cluster.job(job_id)), log.read_text()
        time.sleep(0.1)
    cluster.client('scancel', '--signal=USR1', job_id, check=True)
    fields = cluster.wait_for_job(job_id, finished)
    output = log.read_text()
    assert (fields['JobState'], fields['ExitCode'], fields['Restarts']) == ('COMPLETED', '0:0',
                                                                            '1'), output[-4000:]
    first, _, second = output.partition(f'requeueing job {job_id}')
    assert 'Saving checkpoint at 3 iterations (stop signal SIGUSR1)' in first, output[-4000:]
    # srun reports the tasks together or one by one, as they end
    assert re.search(r'tasks? [0-9-]+: Exited with exit code 75', first), output[-4000:]
    assert 'slurm_train.sh: training interrupted (status 75);' in first
    assert 'restart 1 by Slurm: resuming from the checkpoint' in second, output[-4000:]
    assert resumed_from(second) == 3
    work_dir = uninterrupted_job[0]
    assert_same_training_state(read_checkpoint(tmp_path / 'work' / f'iter_{MAX_ITERS}.pth'),
                               read_checkpoint(work_dir / f'iter_{MAX_ITERS}.pth'))


@pytest.mark.slow
def test_time_limit_warning_saves_before_slurm_kills_the_job(cluster, tiny_demo_data, tmp_path):
    """slurm_train.sh outside a batch job (its srun makes the allocation, SIGNAL_LEAD=120): once
    both tasks train, the job's time limit is cut to leave 45-105 s. Slurm checks limits every
    30 s: at its next check it sends SIGUSR1, the tasks save the iteration and exit 75, and the
    job ends before the limit (not TIMEOUT). (The limit is cut only
    then because a warning during start-up, before the handlers exist, kills the task.)"""
    markers = tmp_path / 'markers'
    markers.mkdir()
    config = write_slurm_config(
        tmp_path, f"dict(type='WaitForStopSignalHook', at=3, folder={str(markers)!r})")
    work_dir = tmp_path / 'work'
    env = job_env(cluster, tmp_path, SRUN_ARGS='--time=5', SIGNAL_LEAD='120', MAX_REQUEUES='0')
    with open(tmp_path / 'output.log', 'w') as log:
        process = subprocess.Popen(
            slurm_train_command(config, 'afno-time', tiny_demo_data, work_dir), cwd=ROOT,
            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while len(list(markers.glob('rank*.waiting'))) < 2:
            assert time.monotonic() < deadline and process.poll() is None, \
                (tmp_path / 'output.log').read_text()[-4000:]
            time.sleep(0.1)
        job_id = cluster.client('squeue', '-h', '--name=afno-time', '-o', '%i',
                              check=True).stdout.strip()
        elapsed = seconds(cluster.job(job_id)['RunTime'])
        limit_min = -(-(elapsed + 45) // 60)
        cluster.client('scontrol', 'update', f'JobId={job_id}', f'TimeLimit={limit_min}',
                     check=True)
        process.wait(timeout=JOB_TIMEOUT_S)
    finally:
        process.kill()
        process.wait()
    output = (tmp_path / 'output.log').read_text()
    assert process.returncode == 75, output[-4000:]
    assert 'Saving checkpoint at 3 iterations (stop signal SIGUSR1)' in output, output[-4000:]
    assert 'after 0 reruns; giving up; to continue, run it again with --resume' in output
    assert complete_checkpoint_named_by(work_dir) == 3
    job = cluster.job(job_id)
    # FAILED (exit code 75), or CANCELLED when srun's --kill-on-bad-exit ended the step after the
    # first task's 75: either way not TIMEOUT, and well within the limit.
    assert job['JobState'] != 'TIMEOUT' and 'DUE TO TIME LIMIT' not in output, job
    assert seconds(job['RunTime']) < 60 * limit_min, job


def seconds(run_time: str) -> int:
    """Slurm's ``[days-]hours:minutes:seconds`` as seconds (under a day here)."""
    hours, minutes, secs = map(int, run_time.split('-')[-1].split(':'))
    return hours * 3600 + minutes * 60 + secs


@pytest.mark.slow
def test_the_documented_slurm_commands_run_as_written(slurm, tmp_path):
    """docs/install.md's block, run and checked as tests/test_doc_examples.py runs a page's
    block, with the script's folder set to this module's cluster: its ``start`` finds the cluster
    up (not a second one) and its ``stop`` stops it, so this test comes last in the module."""
    (where, block), = marked_blocks(SLURM_MARKER)
    output = run_as_written(where, block, tmp_path, AFNO_SEG_SLURM_DIR=str(slurm.folder))
    assert 'slurm_local_cluster.sh: already running' in output, output[-4000:]
    work_dir = tmp_path / 'repo' / 'work_dirs' / 'slurm'
    assert len(list(work_dir.glob('slurm-*.out'))) == 1
    run_log, = work_dir.glob('*/*.log')
    assert 'Distributed launcher: slurm' in run_log.read_text()
    assert complete_checkpoint_named_by(work_dir) == 4
