#!/usr/bin/env bash
# A Soft-RoCE cluster of N qemu VMs on this host: each VM boots the kernel of vm.sh with its own
# rxe device on its own virtio NIC, and the NICs are joined into one Ethernet segment by
# soft-roce-ci/hub.py, which exists only as unix-domain sockets in a private directory: no host
# IP address carries the traffic (multicast included). RoCE packets really cross between
# kernels. The command runs once per VM, as node i on VM i, with LOCO_NODE_ID=i, LOCO_PEERS
# (every VM's address and --port) and LOCO_CLUSTER_KEY (a fresh key unless set) in its
# environment, in the work directory shared by every VM.
#
# Usage: soft-roce-ci/cluster.sh [options] [--] CMD [ARGS...]
#   --vms N          number of VMs (2-8, default 3)
#   --port P         rendezvous port in LOCO_PEERS (default 7470)
#   --timeout SECS   per VM (default: $LOCO_VM_TIMEOUT or 600)
#   --during SCRIPT  host-side bash run in the background once every VM has started its
#                    command; it may call: cut_vm I / heal_vm I (the hub drops / forwards again
#                    every frame of VM I: a partition), kill_vm I (qemu of VM I killed with
#                    SIGKILL: no FIN, the host vanishes), hub_stats, and sleep
#   --quiet          print only the VMs' summaries, not their whole output
#   -h, --help       this text
#
# VM i has address 10.77.0.(i+1)/24 on eth0 and rxe0 on top of it (GID index 1); the command
# sees LOCO_RDMA_DEVICE=rxe0 LOCO_GID_INDEX=1. A command can use `tc qdisc ... netem` on eth0
# (loss, delay, reordering: the sch_netem module is loaded) and `rdma statistic` / the rxe
# counters in /sys/class/infiniband/rxe0/ports/1/hw_counters to see its packets.
#
# Output: each VM's output, prefixed `[vmI]`, then one line per VM with its exit status.
# Exit status: 0 if every VM's command exited 0, else 1 (125: the cluster could not start).
#
# Resources: LOCO_VM_MEM MiB per VM (default here 1024), LOCO_VM_SMP vCPUs per VM (default 1).
# On a 2-core host three TCG-emulated VMs boot in about 10-20 s and RDMA round trips between
# them take about 100-300 µs.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

vms=3 port=7470 timeout_s=${LOCO_VM_TIMEOUT:-600} during= quiet=0
while [ $# -gt 0 ]; do
    case $1 in
        --vms) [ $# -ge 2 ] || usage 2 >&2; vms=$2; shift ;;
        --port) [ $# -ge 2 ] || usage 2 >&2; port=$2; shift ;;
        --timeout) [ $# -ge 2 ] || usage 2 >&2; timeout_s=$2; shift ;;
        --during) [ $# -ge 2 ] || usage 2 >&2; during=$2; shift ;;
        --quiet) quiet=1 ;;
        -h | --help) usage 0 ;;
        --) shift; break ;;
        -*) log "unknown option: $1"; usage 2 >&2 ;;
        *) break ;;
    esac
    shift
done
[ $# -gt 0 ] || { log "no command given"; usage 2 >&2; }
case $vms in [2-8]) ;; *) die "--vms wants 2 to 8, got '$vms'" ;; esac
case $port in '' | *[!0-9]*) die "--port wants a port number, got '$port'" ;; esac
need_cmd python3 python3

dir=$(mktemp -d "${TMPDIR:-/tmp}/loco-cluster.XXXXXX")
hub_pid=
cleanup() {
    [ -z "$hub_pid" ] || kill "$hub_pid" 2>/dev/null || true
    # Any VM still up (interrupted run): its qemu has the segment's socket path in its args.
    pkill -9 -f "$dir/vm-" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

python3 "$SRC_DIR/hub.py" "$dir" "$vms" >"$dir/hub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 100); do
    grep -q 'hub ready' "$dir/hub.log" 2>/dev/null && break
    kill -0 "$hub_pid" 2>/dev/null || { cat "$dir/hub.log" >&2; die "the hub did not start"; }
    sleep 0.05
done

# hub_ctl CMD: one control line to the hub, and its reply.
hub_ctl() {
    python3 - "$dir/ctl.sock" "$*" "$dir/ctl-client-$$-$RANDOM.sock" <<'PY'
import os, socket, sys
ctl, msg, me = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(me)
s.settimeout(5)
try:
    s.sendto(msg.encode(), ctl)
    print(s.recv(4096).decode())
finally:
    os.unlink(me)
PY
}
cut_vm() { log "cut vm$1 off the segment: $(hub_ctl cut "$1")"; }
heal_vm() { log "vm$1 back on the segment: $(hub_ctl heal "$1")"; }
hub_stats() { log "hub: $(hub_ctl stats)"; }
kill_vm() { log "killing vm$1 (SIGKILL to its qemu)"; pkill -9 -f "$dir/vm-$1.sock" || true; }

key=${LOCO_CLUSTER_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
peers=
for i in $(seq 0 $((vms - 1))); do
    peers+="${peers:+,}10.77.0.$((i + 1)):$port"
done
log "$vms VMs on segment $dir (10.77.0.1-$vms), LOCO_PEERS=$peers"

t0=$(now)
pids=()
for i in $(seq 0 $((vms - 1))); do
    LOCO_VM_MEM=${LOCO_VM_MEM:-1024} LOCO_VM_SMP=${LOCO_VM_SMP:-1} \
        "$SRC_DIR/vm.sh" --timeout "$timeout_s" --hub "$dir" --index "$i" \
        --addr "10.77.0.$((i + 1))/24" \
        -e LOCO_NODE_ID="$i" -e LOCO_PEERS="$peers" -e LOCO_CLUSTER_KEY="$key" \
        -e LOCO_CLUSTER_VMS="$vms" -e LOCO_BOOTSTRAP="${LOCO_BOOTSTRAP:-tcp}" \
        -- "$@" >"$dir/out-$i" 2>&1 &
    pids+=($!)
done

during_pid=
if [ -n "$during" ]; then
    (
        # Once every VM runs its command (vm.sh's guest writes `ready` in its control dir,
        # which cluster.sh cannot see; the command's first output line is the next best sign).
        for i in $(seq 0 $((vms - 1))); do
            for _ in $(seq 600); do
                [ -s "$dir/out-$i" ] && break
                sleep 0.1
            done
        done
        eval "$during"
    ) &
    during_pid=$!
fi

rcs=()
for i in $(seq 0 $((vms - 1))); do
    set +e
    wait "${pids[$i]}"
    rcs+=($?)
    set -e
done
[ -z "$during_pid" ] || wait "$during_pid" 2>/dev/null || true
hub_stats

rc=0
for i in $(seq 0 $((vms - 1))); do
    if [ "$quiet" -eq 0 ]; then
        sed "s/^/[vm$i] /" "$dir/out-$i"
    fi
done
for i in $(seq 0 $((vms - 1))); do
    echo "vm$i: exit ${rcs[$i]}"
    [ "${rcs[$i]}" -eq 0 ] || rc=1
done
log "cluster of $vms VMs done in $(elapsed "$t0") s"
exit "$rc"
