#!/usr/bin/env bash
# Inference over many processes with torchrun: each rank segments every PROCESSES-th input.
#   bash tools/dist_inference.sh CONFIG CHECKPOINT PROCESSES INPUT... --out-dir DIR [inference.py args]
#   multi-node: NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 (DIR on a shared file system)
#   torchrun's rendezvous and gloo authenticate nobody: run the nodes on a network only they share
#   (docs/security.md). A rerun clears only temporary files its own host's dead processes left.
# Without CUDA the processes share the CPU (gloo); with --device cuda rank r uses cuda:LOCAL_RANK.
# Rank 0 writes DIR/summary.json once every rank is through; if a rank dies, torchrun stops the
# others, rank 0 names what was left undone, and rerunning the same command finishes only that.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
PROCESSES=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-60}
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$( [ -x "$here/../.venv/bin/python" ] && echo "$here/../.venv/bin/python" || echo python )}

PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$PROCESSES" \
    --master_port="$PORT" \
    --shutdown-timeout="$SHUTDOWN_TIMEOUT" \
    "$here/inference.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
