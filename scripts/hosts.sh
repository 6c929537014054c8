#!/usr/bin/env bash
# Emulated hosts on this machine: K network, UTS, IPC and mount namespaces, each with its own
# hostname, its own /dev/shm and /etc/hosts, and an eth0 on a veth pair to one bridge, the
# links rate-limited with tc's token bucket (tbf). Open MPI then sees K nodes: its shared-
# memory transport cannot cross them (MPI_Comm_split_type(SHARED) groups ranks per host)
# and every message between hosts is real TCP through a rate-limited link. The hosts share
# this machine's CPUs, memory and file system; no delay is added to the links.
#
#   bash scripts/hosts.sh up K [--rate R] [--slots S]   bring up K hosts (or make them so)
#   bash scripts/hosts.sh down                           remove every host, link and process
#   bash scripts/hosts.sh status                         the hosts, addresses, links, rate
#   bash scripts/hosts.sh mpirun MPIRUN_ARGS...          Open MPI's mpirun across the hosts
#   bash scripts/hosts.sh exec HOST CMD...               run CMD on HOST (its namespaces)
#   bash scripts/hosts.sh rate R                         change every link's rate
#   bash scripts/hosts.sh link HOST up|down              take a host's link down, bring it back
#   bash scripts/hosts.sh kill HOST                      kill every process running on HOST
#
# Options (before or after the command): --name NAME (default ringh, or $RING_HOSTS_NAME)
# names the set: hosts NAME-h0..NAME-h<K-1>, bridge NAME-br, state in /run/ring-hosts/NAME,
# so sets of different names coexist. R is a tc rate (100mbit, 1gbit, 10gbit, 25gbit; a
# bare number is Gbit/s) or none; S the slots per host in the hostfile (default: this
# machine's cores, which every host shares).
#
# `mpirun` starts Open MPI's mpirun on host 0 with the set's hostfile and an rsh agent that
# enters the named host's namespaces (--mca plm_rsh_agent) instead of ssh. Its stdout is
# passed through; its stderr too on success. On failure it prints one line naming the cause
# (a host's link down, a host's processes killed, a rank's own error line, Open MPI's
# reason), with the path of Open MPI's full output, and exits with mpirun's status. Its
# daemons send TCP keepalives every second, so a host that stops answering ends the job
# within seconds instead of after the kernel's retransmission timeout.
#
# Needs root, namespaces, iproute2 (ip, tc), util-linux (unshare, nsenter); mpirun needs
# openmpi-bin. It refuses in one line where any is missing. `up` is idempotent and removes
# what it made when it fails; `down` removes whatever of the set exists.
set -euo pipefail

prog=hosts.sh
script=$(readlink -f "${BASH_SOURCE[0]}")
state_root=${RING_HOSTS_STATE:-/run/ring-hosts}
name=${RING_HOSTS_NAME:-ringh}
rate=10gbit
slots=$(nproc)

die() {
    echo "$prog: $*" >&2
    exit 1
}

usage() {
    sed -n '/^#   bash/s/^#   //p' "$script" >&2
    exit 2
}

# -- what this needs, refused in one line -----------------------------------------------------

need_root() {
    [ "$(id -u)" -eq 0 ] ||
        die "needs root: emulated hosts are network, UTS, IPC and mount namespaces (run as root or with sudo)"
    local tool
    for tool in ip tc; do
        command -v "$tool" >/dev/null || die "needs $tool (apt-get install iproute2)"
    done
    for tool in unshare nsenter; do
        command -v "$tool" >/dev/null || die "needs $tool (apt-get install util-linux)"
    done
}

need_namespaces() {
    local why
    if ! why=$(unshare --net --uts --ipc --mount true 2>&1); then
        die "cannot create network, UTS, IPC and mount namespaces here (unshare: ${why:-failed}); a container needs them allowed (e.g. docker run --privileged)"
    fi
}

need_mpirun() {
    command -v mpirun >/dev/null || die "needs Open MPI's mpirun (apt-get install openmpi-bin)"
    mpirun --version 2>&1 | grep -q "Open MPI" ||
        die "mpirun is not Open MPI's ($(command -v mpirun)); the rsh agent is Open MPI's (apt-get install openmpi-bin)"
}

# -- the set's names and state ----------------------------------------------------------------

check_name() {
    [[ $name =~ ^[a-z][a-z0-9]{0,9}$ ]] ||
        die "--name $name: use 1-10 lowercase letters and digits, starting with a letter"
}

state() { echo "$state_root/$name"; }
bridge() { echo "$name-br"; }
host_name() { echo "$name-h$1"; }

# The hosts of the set as recorded by `up`: "index hostname address" per line.
hosts_of() {
    [ -f "$(state)/hosts" ] || die "no hosts named $name are up (bash scripts/hosts.sh up K --name $name)"
    cat "$(state)/hosts"
}

holder_of() {
    local pid
    pid=$(cat "$(state)/$1.pid" 2>/dev/null) || die "$1 is not a host of $name (bash scripts/hosts.sh status --name $name)"
    [ -d "/proc/$pid" ] || die "$1 is down: its namespaces' process $pid is gone (bash scripts/hosts.sh up again)"
    echo "$pid"
}

# Enter a host's namespaces (all but PID: its processes stay visible, and killable, here).
enter() {
    local pid
    pid=$(holder_of "$1")
    shift
    nsenter --target "$pid" --net --uts --ipc --mount --wd="$PWD" -- "$@"
}

# A /24 for the set in 10.251.0.0/16 that no interface here uses yet.
pick_subnet() {
    local third used
    third=$(($(printf '%s' "$name" | cksum | cut -d' ' -f1) % 250))
    used=$(ip -4 -o addr show | awk '{print $4}')
    for _ in $(seq 250); do
        if ! grep -q "^10\.251\.$third\." <<<"$used"; then
            echo "10.251.$third"
            return
        fi
        third=$(((third + 1) % 250))
    done
    die "no free /24 in 10.251.0.0/16 for the hosts' network"
}

parse_rate() {
    case $1 in
        none | 0) echo none ;;
        *[!0-9.]*)
            [[ $1 =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] ||
                die "--rate $1: give a tc rate (100mbit, 1gbit, 10gbit, 25gbit), Gbit/s as a number, or none"
            echo "$1"
            ;;
        *) echo "${1}gbit" ;;
    esac
}

# tbf on both ends of a host's veth (each direction): a bucket of 1 ms of traffic (at least
# 64 KiB, so the kernel's offloaded segments fit) and at most 50 ms of queue.
apply_rate() {
    local index=$1 host bytes_per_s burst
    host=$(host_name "$index")
    if [ "$rate" = none ]; then
        tc qdisc del dev "$host" root 2>/dev/null || true
        enter "$host" tc qdisc del dev eth0 root 2>/dev/null || true
        return
    fi
    bytes_per_s=$(tc_bytes_per_s "$rate")
    burst=$((bytes_per_s / 1000 > 65536 ? bytes_per_s / 1000 : 65536))
    try tc qdisc replace dev "$host" root tbf rate "$rate" burst "$burst" latency 50ms
    try enter "$host" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
}

tc_bytes_per_s() {
    awk -v r="$1" 'BEGIN {
        n = r + 0; unit = r; sub(/^[0-9.]+/, "", unit)
        f = unit == "kbit" ? 1e3 : unit == "mbit" ? 1e6 : unit == "gbit" ? 1e9 : 1
        printf "%d\n", n * f / 8 }'
}

# -- up, down, status -------------------------------------------------------------------------

up() {
    local count=$1
    if ! [[ $count =~ ^[0-9]+$ ]] || [ "$count" -lt 1 ] || [ "$count" -gt 64 ]; then
        die "up K: K must be a number of hosts from 1 to 64, got $count"
    fi
    check_name
    need_root
    need_namespaces
    if [ -f "$(state)/hosts" ] && [ "$(wc -l <"$(state)/hosts")" -eq "$count" ] && healthy; then
        local index
        for index in $(seq 0 $((count - 1))); do apply_rate "$index"; done
        echo "$rate" >"$(state)/rate"
        status
        return
    fi
    down_quietly
    # A failure below has said why in one line (die); whatever was made goes with it.
    trap 'down_quietly' EXIT
    bring_up "$count"
    trap - EXIT
    status
}

# Run a command that must succeed; its own complaint becomes the one line.
try() {
    local out
    out=$("$@" 2>&1) || die "$* failed: ${out//$'\n'/ }"
}

bring_up() {
    local count=$1 subnet dir index host address pid
    dir=$(state)
    mkdir -p "$dir"
    subnet=$(pick_subnet)
    echo "$subnet" >"$dir/subnet"
    try ip link add "$(bridge)" type bridge
    try ip addr add "$subnet.254/24" dev "$(bridge)"
    try ip link set "$(bridge)" up
    : >"$dir/hosts.new"
    : >"$dir/hostfile"
    printf '127.0.0.1\tlocalhost\n%s.254\t%s-gateway\n' "$subnet" "$name" >"$dir/etc-hosts"
    for index in $(seq 0 $((count - 1))); do
        host=$(host_name "$index")
        address=$subnet.$((index + 1))
        echo "$index $host $address" >>"$dir/hosts.new"
        echo "$host slots=$slots" >>"$dir/hostfile"
        printf '%s\t%s\n' "$address" "$host" >>"$dir/etc-hosts"
    done
    for index in $(seq 0 $((count - 1))); do
        host=$(host_name "$index")
        address=$subnet.$((index + 1))
        try ip netns add "$host"
        try ip link add "$host" type veth peer name eth0 netns "$host"
        try ip link set "$host" master "$(bridge)" up
        try ip -n "$host" addr add "$address/24" dev eth0
        try ip -n "$host" link set eth0 up
        try ip -n "$host" link set lo up
        # The host's other namespaces, held by a process that sleeps in them: its hostname,
        # its IPC, a mount namespace with its own /dev/shm and /etc/hosts.
        # shellcheck disable=SC2016 # the holder's shell expands its own arguments
        setsid nsenter --net="/run/netns/$host" \
            unshare --uts --ipc --mount --propagation private \
            sh -c 'hostname "$1" && mount -t tmpfs -o mode=1777 shm /dev/shm &&
                   mount --bind "$2" /etc/hosts && touch "$3" && exec sleep infinity' \
            holder "$host" "$dir/etc-hosts" "$dir/$host.ready" \
            </dev/null >/dev/null 2>"$dir/$host.holder.log" &
        pid=$!
        disown
        echo "$pid" >"$dir/$host.pid"
        wait_ready "$host" "$pid"
        apply_rate "$index"
    done
    echo "$rate" >"$dir/rate"
    write_agent
    mv "$dir/hosts.new" "$dir/hosts"
}

wait_ready() {
    local host=$1 pid=$2
    for _ in $(seq 100); do
        [ -f "$(state)/$host.ready" ] && return
        [ -d "/proc/$pid" ] || break
        sleep 0.05
    done
    die "$host did not start: $(tr '\n' ' ' <"$(state)/$host.holder.log")"
}

# The rsh agent Open MPI calls as `AGENT HOST COMMAND...`.
write_agent() {
    printf '#!/bin/sh\nexec bash %q --name %q rsh "$@"\n' "$script" "$name" >"$(state)/rsh"
    chmod +x "$(state)/rsh"
}

healthy() {
    local index host address pid
    ip link show "$(bridge)" >/dev/null 2>&1 || return 1
    while read -r index host address; do
        pid=$(cat "$(state)/$host.pid" 2>/dev/null) || return 1
        [ -d "/proc/$pid" ] || return 1
        [ "$(readlink "/proc/$pid/ns/net")" = "$(ip netns exec "$host" readlink /proc/self/ns/net 2>/dev/null)" ] || return 1
        ip link show "$host" >/dev/null 2>&1 || return 1
        : "$index" "$address"
    done <"$(state)/hosts"
}

down() {
    need_root
    check_name
    down_quietly
    echo "$prog: hosts $name are down"
}

# Every process in the set's namespaces, the namespaces, the links, the bridge, the state;
# whatever of them exists (after a failed `up` too).
down_quietly() {
    local host link pid
    for host in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true); do
        for pid in $(ip netns pids "$host" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    done
    for pid in $(cat "$(state)"/*.pid 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    for host in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true); do
        ip netns delete "$host" 2>/dev/null || true
    done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
        grep -E "^$name-(h[0-9]+|br)$" || true); do
        ip link delete "$link" 2>/dev/null || true
    done
    rm -rf "$(state)"
    rmdir "$state_root" 2>/dev/null || true  # when no other set is up
}

status() {
    local index host address pid link
    hosts_of >/dev/null
    echo "hosts $name: bridge $(bridge) $(cat "$(state)/subnet").254/24, rate $(cat "$(state)/rate") each way, hostfile $(state)/hostfile"
    while read -r index host address; do
        pid=$(cat "$(state)/$host.pid")
        link=$(cat "/sys/class/net/$host/operstate" 2>/dev/null || echo missing)
        [ -d "/proc/$pid" ] || link="down (its namespaces' process is gone)"
        printf '  %s  %s  link %s\n' "$host" "$address" "$link"
        : "$index"
    done < <(hosts_of)
}

# -- running on the hosts ---------------------------------------------------------------------

# Open MPI's rsh agent: `rsh HOST COMMAND...`. The command line is one the remote shell would
# parse (quoted words), as with ssh. A run started by `mpirun` below learns here how each
# host's daemon ended, for its one-line error.
rsh() {
    local host=$1 status=0
    shift
    enter "$host" /bin/sh -c "$*" || status=$?
    if [ "$status" -ne 0 ] && [ -n "${RING_HOSTS_RUN:-}" ]; then
        echo "$host $status" >>"$RING_HOSTS_RUN.ended"
    fi
    return "$status"
}

run_mpirun() {
    need_root
    need_mpirun
    check_name
    local first log status=0
    first=$(hosts_of | awk 'NR == 1 {print $2}')
    log=$(mktemp "$(state)/mpirun.XXXXXX")
    export RING_HOSTS_RUN=$log
    enter "$first" mpirun --allow-run-as-root --hostfile "$(state)/hostfile" \
        --mca plm_rsh_agent "$(state)/rsh" \
        --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 \
        --mca oob_tcp_keepalive_probes 3 \
        "$@" 2>"$log" || status=$?
    if [ "$status" -eq 0 ]; then
        cat "$log" >&2
        rm -f "$log" "$log.ended"
        return 0
    fi
    echo "$prog: the MPI job failed: $(failure_cause "$log") (mpirun exit $status; Open MPI's output: $log)" >&2
    return "$status"
}

# The first that applies: a host whose link is down; a rank's own error line; a host whose
# daemon was killed; the rank Open MPI saw end; Open MPI's reason.
failure_cause() {
    local log=$1 index host address line ended
    while read -r index host address; do
        if [ "$(cat "/sys/class/net/$host/operstate" 2>/dev/null)" = down ] ||
            [ "$(enter "$host" cat /sys/class/net/eth0/operstate 2>/dev/null)" = down ]; then
            echo "host $host is unreachable: its link is down (bash scripts/hosts.sh link $host up)"
            return
        fi
        : "$index" "$address"
    done < <(hosts_of)
    line=$(grep -m1 -E '^[A-Za-z0-9_.-]+: (error: |--timeout )' "$log" || true)
    [ -n "$line" ] && { echo "$line"; return; }
    if [ -s "$log.ended" ]; then
        read -r host ended <"$log.ended"
        if [ "$ended" -gt 128 ]; then
            echo "the processes on host $host were killed (signal $((ended - 128)))"
        else
            echo "Open MPI's daemon on host $host exited with status $ended"
        fi
        return
    fi
    line=$(grep -m1 -E 'mpirun noticed that|lost communication with a remote daemon' "$log" || true)
    [ -n "$line" ] && { sed -E 's/^[[:space:]]+//; s/\.$//' <<<"$line"; return; }
    line=$(grep -m1 -vE '^[[:space:]]*(-+)?[[:space:]]*$' "$log" || true)
    echo "${line:-mpirun printed nothing}"
}

# -- faults -----------------------------------------------------------------------------------

set_link() {
    local host=$1 updown=$2
    [[ $updown =~ ^(up|down)$ ]] || die "link HOST up|down, got $updown"
    hosts_of >/dev/null
    holder_of "$host" >/dev/null
    try ip link set "$host" "$updown"
    try enter "$host" ip link set eth0 "$updown"
    echo "$prog: link of $host is $updown"
}

kill_host() {
    local host=$1 holder pid count=0
    hosts_of >/dev/null
    holder=$(holder_of "$host")
    for pid in $(ip netns pids "$host"); do
        [ "$pid" = "$holder" ] && continue
        kill -9 "$pid" 2>/dev/null && count=$((count + 1))
    done
    echo "$prog: killed $count processes on $host"
}

set_rate() {
    need_root
    check_name
    local index host address
    while read -r index host address; do
        apply_rate "$index"
        : "$host" "$address"
    done < <(hosts_of)
    echo "$rate" >"$(state)/rate"
    echo "$prog: links of $name at $rate each way"
}

# -- the command line -------------------------------------------------------------------------

args=()
while [ $# -gt 0 ]; do
    case $1 in
        --name) name=${2:?--name needs a value}; shift 2 ;;
        --name=*) name=${1#--name=}; shift ;;
        --rate) rate=$(parse_rate "${2:?--rate needs a value}"); shift 2 ;;
        --rate=*) rate=$(parse_rate "${1#--rate=}"); shift ;;
        --slots) slots=${2:?--slots needs a value}; shift 2 ;;
        --slots=*) slots=${1#--slots=}; shift ;;
        -h | --help) usage ;;
        # What follows is the command's own (mpirun's options, a command to run).
        mpirun | exec | rsh) args+=("$@"); break ;;
        *) args+=("$1"); shift ;;
    esac
done
[ ${#args[@]} -gt 0 ] || usage
[[ $slots =~ ^[1-9][0-9]*$ ]] || die "--slots $slots: give a positive number"
command=${args[0]}
args=("${args[@]:1}")
case $command in
    up) [ ${#args[@]} -eq 1 ] || usage; up "${args[0]}" ;;
    down) [ ${#args[@]} -eq 0 ] || usage; down ;;
    status) need_root; check_name; status ;;
    rate) [ ${#args[@]} -eq 1 ] || usage; rate=$(parse_rate "${args[0]}"); set_rate ;;
    link) [ ${#args[@]} -eq 2 ] || usage; need_root; check_name; set_link "${args[@]}" ;;
    kill) [ ${#args[@]} -eq 1 ] || usage; need_root; check_name; kill_host "${args[0]}" ;;
    exec)
        [ ${#args[@]} -ge 2 ] || usage
        need_root
        check_name
        host=${args[0]}
        args=("${args[@]:1}")
        [ "${args[0]}" != -- ] || args=("${args[@]:1}")
        [ ${#args[@]} -ge 1 ] || usage
        # exec: whoever started this holds the command's own process (slurm.sh kills it).
        hosts_of >/dev/null
        pid=$(holder_of "$host")
        exec nsenter --target "$pid" --net --uts --ipc --mount --wd="$PWD" -- "${args[@]}"
        ;;
    rsh) [ ${#args[@]} -ge 2 ] || usage; rsh "${args[@]}" ;;
    mpirun) run_mpirun "${args[@]}" ;;
    *) usage ;;
esac
