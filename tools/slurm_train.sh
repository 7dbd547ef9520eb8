#!/usr/bin/env bash
# Training on a Slurm cluster (mmseg's slurm_train.sh interface), surviving pre-emption and the
# time limit.
#   GPUS=16 bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG [train.py args]
#   CPU partition: GPUS=2 GPUS_PER_NODE=0 CPUS_PER_TASK=1 bash tools/slurm_train.sh cpu job CONFIG
#   As a requeueable batch job, every attempt appended to one log under work_dirs/ (Slurm truncates
#   it on requeue otherwise; docs/install.md runs this on tools/slurm_local_cluster.sh's cluster):
#     mkdir -p work_dirs/slurm && sbatch --requeue --signal=USR1@180 --open-mode=append \
#         --output=work_dirs/slurm/slurm-%j.out --wrap "bash tools/slurm_train.sh ..."
#
# GPUS is the number of tasks (one process each); GPUS_PER_NODE=0 asks for no GPUs (no --gres,
# which a partition without GPUs refuses), and tasks are then placed TASKS_PER_NODE to a node
# (default: as Slurm chooses). The tasks join one process group (--launcher slurm; gloo without
# CUDA).
#
# srun asks Slurm for SIGUSR1 SIGNAL_LEAD seconds (default 180) before the time limit (measured on
# Slurm 22.05: only when this srun makes the allocation; inside an sbatch job ask sbatch for
# --signal=USR1@180). train.py then (as on SIGTERM, which pre-emption sends, and on
# `scancel --signal=USR1`) finishes its iteration, saves a checkpoint and exits with status 75
# (docs/reliability.md). On status 75 this script
#   - inside a batch job (SLURM_JOB_ID set, e.g. sbatch --requeue wrapping this script):
#     `scontrol requeue $SLURM_JOB_ID`; the requeued job runs again and train.py resumes by itself
#     (SLURM_RESTART_COUNT > 0);
#   - otherwise: runs srun again with --resume (a new allocation), at most MAX_REQUEUES times
#     (default 20).
# Any other status is returned as it is.
set -uo pipefail
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TASKS_PER_NODE=${TASKS_PER_NODE:-$([ "$GPUS_PER_NODE" -gt 0 ] && echo "$GPUS_PER_NODE")}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
SIGNAL_LEAD=${SIGNAL_LEAD:-180}
MAX_REQUEUES=${MAX_REQUEUES:-20}
INTERRUPTED=75
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$( [ -x "$here/../.venv/bin/python" ] && echo "$here/../.venv/bin/python" || echo python )}

placement=()
if [ "$GPUS_PER_NODE" -gt 0 ]; then
    placement+=(--gres=gpu:"$GPUS_PER_NODE")
fi
if [ -n "$TASKS_PER_NODE" ]; then
    placement+=(--ntasks-per-node="$TASKS_PER_NODE")
fi
resume=()
attempt=0
while true; do
    PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
    srun -p "$PARTITION" \
        --job-name="$JOB_NAME" \
        --ntasks="$GPUS" \
        "${placement[@]}" \
        --cpus-per-task="$CPUS_PER_TASK" \
        --kill-on-bad-exit=1 \
        --signal=USR1@"$SIGNAL_LEAD" \
        $SRUN_ARGS \
        "$PYTHON" -u "$here/train.py" "$CONFIG" --launcher=slurm "${@:4}" "${resume[@]}"
    status=$?
    if [ "$status" -ne "$INTERRUPTED" ]; then
        exit "$status"
    fi
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        echo "slurm_train.sh: training interrupted (status $status);" \
             "requeueing job $SLURM_JOB_ID" >&2
        scontrol requeue "$SLURM_JOB_ID"
        exit $?
    fi
    if [ "$attempt" -ge "$MAX_REQUEUES" ]; then
        echo "slurm_train.sh: training interrupted (status $status) after $MAX_REQUEUES reruns;" \
             "giving up; to continue, run it again with --resume" >&2
        exit "$INTERRUPTED"
    fi
    attempt=$((attempt + 1))
    echo "slurm_train.sh: training interrupted (status $status); running it again with --resume" \
         "($attempt of $MAX_REQUEUES)" >&2
    resume=(--resume)
done
