#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to try tools/slurm_train.sh on; tests/test_slurm.py
# runs on the same cluster (docs/install.md, "Slurm").
#   eval "$(bash tools/slurm_local_cluster.sh start)"    # as root; sets SLURM_CONF
#   bash tools/slurm_local_cluster.sh stop
#
# start: installs Debian's slurmctld, slurmd, slurm-client and munge if they are missing
# (apt-get), writes slurm.conf and a munge key into AFNO_SEG_SLURM_DIR (default
# /tmp/afno_seg_slurm), starts munged, slurmctld and slurmd there and waits until the node is idle.
# On stdout it prints the one line the clients (sbatch, srun, squeue, scontrol) need,
# `export SLURM_CONF=<folder>/slurm.conf`; everything else goes to stderr. Run again while the
# cluster is up, it restarts nothing and prints the same line.
# stop: cancels the jobs left, then stops slurmd, slurmctld and munged (their logs stay).
#
# The cluster: node `localhost` with 2 CPUs in partition `cpu`, no GPUs; proctrack/linuxproc,
# task/none, select/cons_tres with CR_Core, SlurmUser=root, munge with its own key and socket (a
# munge service of the machine is left alone), free ports on 127.0.0.1. Two settings make requeues
# quick: cred_expire=5 (a requeued job may start that many seconds later; default 120) and
# sched_interval=1 (pending jobs are looked at every second; default 60).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
DIR=${AFNO_SEG_SLURM_DIR:-/tmp/afno_seg_slurm}
CONF=$DIR/slurm.conf
DAEMONS=(munged slurmctld slurmd)
TOOLS=(munged slurmctld slurmd sbatch srun scontrol scancel sinfo squeue)
START_TIMEOUT_S=30

say() { echo "slurm_local_cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

pid_of() {  # the pid of daemon $1 if it runs from this folder's pid file
    local pid
    pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$1" ]] && echo "$pid"
}

running() {
    local daemon
    for daemon in "${DAEMONS[@]}"; do pid_of "$daemon" >/dev/null || return 1; done
}

free_port() {  # a port on 127.0.0.1 nothing listens on, other than $1
    local port
    while true; do
        port=$((20000 + RANDOM % 30000))
        [[ "$port" != "${1:-}" ]] && ! (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    done
    echo "$port"
}

log_tail() {
    local log
    for log in "$DIR"/*.out "$DIR"/*.log; do
        [[ -f "$log" ]] && tail -n 3 "$log" | sed "s|^|  $(basename "$log"): |" >&2
    done
    return 0
}

wait_for() {  # wait_for WHAT COMMAND...: until COMMAND succeeds, at most START_TIMEOUT_S
    local what=$1 deadline=$((SECONDS + START_TIMEOUT_S))
    shift
    until "$@" 2>/dev/null; do
        if ((SECONDS > deadline)); then
            say "$what did not start within ${START_TIMEOUT_S} s; the logs in $DIR end:"
            log_tail
            stop_daemons
            exit 1
        fi
        sleep 0.2
    done
}

node_idle() { SLURM_CONF=$CONF sinfo -h -N -o %T | grep -q idle; }

install_missing() {
    local tool missing=()
    for tool in "${TOOLS[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    ((${#missing[@]} == 0)) && return
    command -v apt-get >/dev/null ||
        die "missing ${missing[*]} and no apt-get: install Slurm (22.05 is tested) and munge"
    say "installing slurmctld slurmd slurm-client munge (missing ${missing[*]}; apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >&2
}

write_conf() {
    local ctld_port slurmd_port
    ctld_port=$(free_port)
    slurmd_port=$(free_port "$ctld_port")
    cat >"$CONF" <<EOF
ClusterName=afno
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket,cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
    [[ "$(id -u)" == 0 ]] ||
        die "the daemons run as root (SlurmUser=root): run it as root, e.g. sudo bash $0 start"
    install_missing
    if running && SLURM_CONF=$CONF sinfo -h >/dev/null 2>&1; then
        say "already running in $DIR"
        echo "export SLURM_CONF=$CONF"
        return
    fi
    stop_daemons  # what a half-started or crashed cluster left
    mkdir -p -m 700 "$DIR"
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/munge.socket"
    mkdir "$DIR/state" "$DIR/spool"
    (umask 077 && head -c 1024 /dev/urandom >"$DIR/munge.key")  # munged refuses a readable key
    write_conf
    # The daemons detach; their output goes to files, never to this script's stdout (a caller's
    # $(...) would wait for it to close).
    munged --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" \
        --seed-file="$DIR/munged.seed" </dev/null >"$DIR/munged.out" 2>&1
    wait_for munged test -S "$DIR/munge.socket"
    slurmctld -i -f "$CONF" </dev/null >"$DIR/slurmctld.out" 2>&1
    slurmd -N localhost -f "$CONF" </dev/null >"$DIR/slurmd.out" 2>&1
    wait_for 'the node (sinfo)' node_idle
    say "running in $DIR: partition cpu, node localhost, 2 CPUs; the clients need the line" \
        "below (eval it); stop: bash $0 stop"
    echo "export SLURM_CONF=$CONF"
}

stop_daemons() {  # slurmd first, munged last (slurmctld and slurmd authenticate through it)
    local daemon pid deadline
    for daemon in slurmd slurmctld munged; do
        pid=$(pid_of "$daemon") || continue
        kill "$pid"
        deadline=$((SECONDS + 15))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/$daemon.pid"
    done
}

stop() {
    if ! pid_of slurmctld >/dev/null; then
        stop_daemons
        say "not running in $DIR"
        return
    fi
    # Cancel the jobs first, so that their steps end before slurmd does.
    SLURM_CONF=$CONF scancel --user=root 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while [[ -n "$(SLURM_CONF=$CONF squeue -h 2>/dev/null)" ]] && ((SECONDS < deadline)); do
        sleep 0.2
    done
    stop_daemons
    say "stopped (logs in $DIR)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: bash $0 start|stop (AFNO_SEG_SLURM_DIR: the cluster's folder, default" \
           "/tmp/afno_seg_slurm)" ;;
esac
