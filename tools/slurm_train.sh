#!/usr/bin/env bash
# Training on a Slurm cluster (mmseg's slurm_train.sh interface).
#   GPUS=16 bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG [train.py args]
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$( [ -x "$here/../.venv/bin/python" ] && echo "$here/../.venv/bin/python" || echo python )}

PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    $SRUN_ARGS \
    "$PYTHON" -u "$here/train.py" "$CONFIG" --launcher=slurm "${@:4}"
