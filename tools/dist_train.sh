#!/usr/bin/env bash
# Multi-GPU / multi-node training with torchrun (mmseg's dist_train.sh interface).
#   bash tools/dist_train.sh CONFIG GPUS [train.py args]
#   multi-node: NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 bash tools/dist_train.sh CONFIG 8
# Without CUDA the same command runs GPUS processes on the CPU with the gloo backend.
#
# Faults (docs/reliability.md):
#   MAX_RESTARTS=N   torchrun restarts the whole group up to N times when a process dies; the
#                    restarted processes resume from work_dir/last_checkpoint by themselves.
#   SHUTDOWN_TIMEOUT seconds torchrun gives its workers to save a checkpoint after it forwards
#                    SIGTERM/SIGINT/SIGUSR1 to them (default 120), then it SIGKILLs them.
set -euo pipefail
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
MAX_RESTARTS=${MAX_RESTARTS:-0}
SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-120}
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$( [ -x "$here/../.venv/bin/python" ] && echo "$here/../.venv/bin/python" || echo python )}

# torchrun forwards only the signals it handles; SIGUSR1 (Slurm's --signal warning) is added.
TORCHELASTIC_SIGNALS_TO_HANDLE=${TORCHELASTIC_SIGNALS_TO_HANDLE:-SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1} \
PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    --max-restarts="$MAX_RESTARTS" \
    --shutdown-timeout="$SHUTDOWN_TIMEOUT" \
    "$here/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
