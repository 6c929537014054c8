#!/usr/bin/env bash
# A SLURM cluster on this machine, from Debian 12's packages (munge, slurmctld, slurmd,
# slurm-client): a controller and one slurmd here, or one slurmd per emulated host
# (scripts/hosts.sh), so that a job's tasks span hosts. For trying the study's SLURM profile
# (profiles/slurm) against a real scheduler; it is not a cluster to share.
#
#   bash scripts/slurm.sh up [--hosts HOSTS]   start munged, slurmctld and the slurmd(s)
#   bash scripts/slurm.sh down                 stop them and every job's processes
#   bash scripts/slurm.sh status               the nodes and the queue
#   eval "$(bash scripts/slurm.sh env)"        point sbatch, squeue, srun... at the cluster
#
# Options: --name NAME (default ringslurm, or $RING_SLURM_NAME) names the cluster and its
# state folder /run/ring-slurm/NAME; --hosts HOSTS names a set of emulated hosts that is up
# (bash scripts/hosts.sh up K --name HOSTS): one node per host, the controller on the hosts'
# bridge. Without --hosts, one node: this machine.
#
# The cluster has one partition, `ring` (the default), and no accounting database: any
# account name is accepted (-A), and finished jobs stay visible to squeue and scontrol for
# MinJobAge (10 minutes), which is what the Snakemake executor plugin reads job states from
# when started with `--slurm-status-command squeue`. Every finished job is also written to
# /run/ring-slurm/NAME/jobs.txt (jobcomp/filetxt: partition, account, nodes, CPUs, TRES),
# the record the tests check submissions against. MPI jobs start their ranks with
# `srun --mpi=pmix` (the cluster's default MpiDefault): Debian's Open MPI is built against
# PMIx, which Debian's SLURM serves; its PMI-2 plugin (--mpi=pmi2) does not start Open MPI
# ranks, which lack the PMI-2 client.
#
# Each node declares this machine's cores and memory (the emulated hosts share them); jobs
# are not confined to their CPUs (no cgroups). Every daemon runs in a PID namespace of its
# own, so `down` ends the daemons and every job's processes with it. Needs root and the
# packages (apt-get install munge slurmctld slurmd slurm-client); it refuses in one line
# without them. `up` is idempotent and removes what it made when it fails.
set -euo pipefail

prog=slurm.sh
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
state_root=${RING_SLURM_STATE:-/run/ring-slurm}
name=${RING_SLURM_NAME:-ringslurm}
hosts=""
partition=ring
startup_s=30
on_host=()

die() {
    echo "$prog: $*" >&2
    exit 1
}

usage() {
    sed -n '/^#   bash/s/^#   //p; /^#   eval/s/^#   //p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

need() {
    [ "$(id -u)" -eq 0 ] || die "needs root: it starts munged, slurmctld and slurmd (run as root or with sudo)"
    local missing=() tool
    for tool in munged slurmctld slurmd sbatch squeue scontrol sinfo; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "needs ${missing[*]} (apt-get install munge slurmctld slurmd slurm-client, or bash scripts/setup.sh test)"
    command -v unshare >/dev/null || die "needs unshare (apt-get install util-linux)"
    [[ $name =~ ^[a-z][a-z0-9]{0,15}$ ]] ||
        die "--name $name: use 1-16 lowercase letters and digits, starting with a letter"
}

state() { echo "$state_root/$name"; }
conf() { echo "$(state)/etc/slurm.conf"; }

# -- up ---------------------------------------------------------------------------------------

# A port no socket here listens on, near one the cluster's name picks.
free_port() {
    local port used
    port=$((20000 + $(printf '%s%s' "$name" "$1" | cksum | cut -d' ' -f1) % 20000))
    used=$(ss -Htln 2>/dev/null | awk '{n = split($4, a, ":"); print a[n]}')
    while grep -qx "$port" <<<"$used"; do port=$((port + 1)); done
    echo "$port"
}

# The emulated hosts' "index hostname address" lines, or this machine's.
nodes_of() {
    if [ -n "$hosts" ]; then
        local file=${RING_HOSTS_STATE:-/run/ring-hosts}/$hosts/hosts
        [ -f "$file" ] || die "--hosts $hosts: no such emulated hosts are up (bash scripts/hosts.sh up 2 --name $hosts)"
        cat "$file"
    else
        echo "0 $(hostname -s) 127.0.0.1"
    fi
}

controller_address() {
    if [ -n "$hosts" ]; then
        echo "$(cat "${RING_HOSTS_STATE:-/run/ring-hosts}/$hosts/subnet").254"
    else
        echo 127.0.0.1
    fi
}

write_conf() {
    local dir cpus memory_mb index node address
    dir=$(state)
    cpus=$(nproc)
    memory_mb=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024))
    cat >"$(conf)" <<EOF
# Written by scripts/slurm.sh for the cluster $name; removed by \`bash scripts/slurm.sh down\`.
ClusterName=$name
SlurmctldHost=$(hostname -s)($(controller_address))
SlurmctldPort=$(free_port ctld)
SlurmdPort=$(free_port slurmd)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/builtin
MpiDefault=pmix
ReturnToService=2
MinJobAge=600
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobs.txt
EOF
    while read -r index node address; do
        echo "NodeName=$node NodeAddr=$address CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN" >>"$(conf)"
        : "$index"
    done < <(nodes_of)
    echo "PartitionName=$partition Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$(conf)"
}

# slurmd, in a mount namespace where the cluster's configuration is /etc/slurm: its jobs'
# own srun calls find it there, as on a cluster's node (Snakemake's job step drops
# SLURM_CONF from their environment).
# shellcheck disable=SC2016 # the node's shell expands its own arguments
slurmd_on_node='mount --bind "$1" /etc/slurm && exec slurmd -D -N "$2"'

# A daemon in the foreground, in a PID namespace of its own: killing the `unshare` that
# holds it ends the namespace and so every process in it (slurmd's: every job step).
# On an emulated host, `on_host HOST` enters its namespaces first.
start_daemon() {
    local label=$1
    shift
    setsid "${on_host[@]}" unshare --pid --fork --mount-proc --kill-child "$@" \
        </dev/null >>"$(state)/$label.out" 2>&1 &
    echo $! >"$(state)/$label.holder"
    disown
}

up() {
    need
    local dir
    dir=$(state)
    if [ -f "$dir/up" ] && running; then
        status
        return
    fi
    down_quietly
    trap "down_quietly" EXIT
    mkdir -p "$dir/ctld"
    nodes_of >/dev/null
    # A key of the cluster's own (munge's key file must be private to its user).
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 600 "$dir/munge.key"
    mkdir -p "$dir/etc"
    write_conf
    start_daemon munged munged --foreground --force --key-file="$dir/munge.key" \
        --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
        --seed-file="$dir/munged.seed"
    wait_for "munged" test -S "$dir/munge.socket"
    SLURM_CONF=$(conf) start_daemon slurmctld slurmctld -D -i -f "$(conf)"
    wait_for "slurmctld" env SLURM_CONF="$(conf)" scontrol ping
    local index node address
    while read -r index node address; do
        # Each node's own copy of the configuration, with a PMIx folder of its own: the
        # emulated hosts share /tmp, where PMIx would make the same folder on each.
        mkdir -p "$dir/etc-$node" "$dir/pmix-$node" "$dir/spool-$node"
        cp "$(conf)" "$dir/etc-$node/slurm.conf"
        echo "PMIxCliTmpDirBase=$dir/pmix-$node" >"$dir/etc-$node/mpi.conf"
        [ -z "$hosts" ] || on_host=(bash "$script_dir/hosts.sh" --name "$hosts" exec "$node")
        start_daemon "slurmd-$node" sh -c "$slurmd_on_node" slurmd "$dir/etc-$node" "$node"
        : "$index" "$address"
    done < <(nodes_of)
    wait_for "every node idle" all_idle
    touch "$dir/up"
    trap - EXIT
    status
}

wait_for() {
    local what=$1 i
    shift
    for i in $(seq $((startup_s * 5))); do
        "$@" >/dev/null 2>&1 && return
        sleep 0.2
        : "$i"
    done
    die "$what did not come up in $startup_s s; the daemons' logs: $(state)/*.log"
}

all_idle() {
    local states
    states=$(SLURM_CONF=$(conf) sinfo -h -N -o '%t' 2>/dev/null) || return 1
    [ -n "$states" ] && ! grep -qvE '^(idle|mix|alloc)$' <<<"$states"
}

running() {
    local holder
    for holder in "$(state)"/*.holder; do
        [ -f "$holder" ] && [ -d "/proc/$(cat "$holder")" ] || return 1
    done
    SLURM_CONF=$(conf) scontrol ping >/dev/null 2>&1
}

# -- down, status, env ------------------------------------------------------------------------

down() {
    need
    down_quietly
    echo "$prog: cluster $name is down"
}

down_quietly() {
    local holder pid
    for holder in "$(state)"/*.holder; do
        [ -f "$holder" ] || continue
        pid=$(cat "$holder")
        kill -9 "$pid" 2>/dev/null || true
    done
    # The namespaces end with their holders; wait so that no daemon outlives `down`.
    for holder in "$(state)"/*.holder; do
        [ -f "$holder" ] || continue
        pid=$(cat "$holder")
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    done
    rm -rf "$(state)"
    rmdir "$state_root" 2>/dev/null || true  # when no other set is up
}

status() {
    [ -f "$(state)/up" ] || die "cluster $name is not up (bash scripts/slurm.sh up)"
    echo "cluster $name: SLURM_CONF=$(conf), partition $partition, jobs recorded in $(state)/jobs.txt"
    SLURM_CONF=$(conf) sinfo -h -N -o '  %N %t cpus=%c memory=%m partition=%P'
    SLURM_CONF=$(conf) squeue -o '  %i %j %T %R' | sed -n '2,$p'
}

print_env() {
    [ -f "$(state)/up" ] || die "cluster $name is not up (bash scripts/slurm.sh up)"
    printf 'export SLURM_CONF=%q\n' "$(conf)"
}

# -- the command line -------------------------------------------------------------------------

args=()
while [ $# -gt 0 ]; do
    case $1 in
        --name) name=${2:?--name needs a value}; shift 2 ;;
        --name=*) name=${1#--name=}; shift ;;
        --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
        --hosts=*) hosts=${1#--hosts=}; shift ;;
        -h | --help) usage ;;
        *) args+=("$1"); shift ;;
    esac
done
[ ${#args[@]} -eq 1 ] || usage
case ${args[0]} in
    up) up ;;
    down) down ;;
    status) need; status ;;
    env) need; print_env ;;
    *) usage ;;
esac
