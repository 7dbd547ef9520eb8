#!/usr/bin/env bash
# Multi-GPU / multi-node training with torchrun (mmseg's dist_train.sh interface).
#   bash tools/dist_train.sh CONFIG GPUS [train.py args]
#   multi-node: NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 bash tools/dist_train.sh CONFIG 8
# Without CUDA the same command runs GPUS processes on the CPU with the gloo backend.
set -euo pipefail
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$( [ -x "$here/../.venv/bin/python" ] && echo "$here/../.venv/bin/python" || echo python )}

PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$here/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
