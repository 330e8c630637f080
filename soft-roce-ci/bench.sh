#!/usr/bin/env bash
# Latency (and bandwidth) of loco-rs on a Soft-RoCE device next to perftest on the same device,
# in one run (one VM boot where the host has no RDMA). Single host: a thin wrapper over
#   loco bench ops --backend verbs --vs-perftest
# (cli/src/perftest.rs: ib_write_lat, ib_read_lat, ib_atomic_lat against put/get/rfaa/rcas +
# wait, ib_write_bw/ib_read_bw against 64 KiB puts/gets with 16 outstanding, alternated with
# loco in --rounds rounds; it prints the median of the per-round ratios and their spread).
#
# Usage: soft-roce-ci/bench.sh [--native | --vm | --hosts 2] [--iters N] [--rounds R]
#   --iters   iterations per test and round (default 2000)
#   --rounds  rounds of perftest then loco (default 5)
#
# --hosts 2: across two hosts, on two VMs of soft-roce-ci/cluster.sh (each with its own rxe
# device, packets crossing the in-host Ethernet segment), the same command as two processes:
# perftest's servers in n1's process on VM 1, its clients and loco's n0 measuring towards n1's
# memory on VM 0, alternated in --rounds rounds (cli/src/perftest/across.rs); then the lock
# benchmark (loco bench locks --backend verbs, one process per VM, 1 and 2 threads) across
# the same two VMs.
#
# Reading the tables: every latency row compares full round trips. ib_write_lat is a ping-pong
# and reports half a round trip, so its figure is doubled; ib_read_lat and ib_atomic_lat report
# the full round trip, as put+wait, get+wait and rfaa+wait do (the wait returns once the
# completion, which follows the ACK or the response, is polled). Ratios use medians (perftest's
# t_typical): under qemu's TCG averages are dominated by rare multi-millisecond stalls.
# Absolute numbers under emulation mean little; the ratio is the result.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

ROOT=$(cd "$SRC_DIR/.." && pwd)

# inside LOCO ITERS ROUNDS: the single-host comparison, on this host's device.
inside() {
    local loco=$1 iters=$2 rounds=$3
    need_cmd ib_write_lat perftest
    wait_gid "${LOCO_RDMA_DEVICE:-rxe0}" "${LOCO_GID_INDEX:-1}" 5 >/dev/null \
        || die "GID index ${LOCO_GID_INDEX:-1} of ${LOCO_RDMA_DEVICE:-rxe0} is not populated"
    log "loco bench ops --vs-perftest on ${LOCO_RDMA_DEVICE:-rxe0} (kernel $(uname -r))"
    "$loco" bench ops --backend verbs --vs-perftest --sizes 8,65536 --outstanding 1,16 \
        --iters "$iters" --warmup 200 --rounds "$rounds" --no-plot
}

# cross_inside LOCO ITERS ROUNDS: one VM of the two-host run (its node from LOCO_NODE_ID):
# the perftest comparison, then the lock benchmark, each a cluster of the two processes (the
# second on the next rendezvous port, so that it never meets the first's closing sockets).
cross_inside() {
    local loco=$1 iters=$2 rounds=$3
    need_cmd ib_write_lat perftest
    # Through a pipe: the VM's console is a terminal, where the progress bars would draw.
    "$loco" bench ops --backend verbs --vs-perftest --sizes 8,65536 --outstanding 1,16 \
        --iters "$iters" --warmup 200 --rounds "$rounds" --no-plot 2>&1 | cat
    LOCO_PEERS=$(printf '%s\n' "$LOCO_PEERS" | awk -F, '{ for (i = 1; i <= NF; i++) {
            n = split($i, a, ":"); host = substr($i, 1, length($i) - length(a[n]) - 1)
            printf "%s%s:%d", (i > 1 ? "," : ""), host, a[n] + 1 } }') \
        "$loco" bench locks --backend verbs --nodes 2 --threads 1,2 --secs 2 --no-plot 2>&1 | cat
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit $?
fi
if [ "${1:-}" = --cross-inside ]; then
    shift
    cross_inside "$@"
    exit $?
fi

mode=auto
iters=2000
rounds=5
while [ $# -gt 0 ]; do
    case $1 in
        --native) mode=native ;;
        --vm) mode=vm ;;
        --hosts) [ $# -ge 2 ] || usage 2 >&2; [ "$2" = 2 ] || die "--hosts: only 2 is supported"; mode=hosts; shift ;;
        --iters) [ $# -ge 2 ] || usage 2 >&2; iters=$2; shift ;;
        --iters=*) iters=${1#*=} ;;
        --rounds) [ $# -ge 2 ] || usage 2 >&2; rounds=$2; shift ;;
        --rounds=*) rounds=${1#*=} ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
case $iters in '' | *[!0-9]*) die "--iters wants a number, got '$iters'" ;; esac
case $rounds in '' | *[!0-9]*) die "--rounds wants a number, got '$rounds'" ;; esac

need_cmd cargo "rustup (https://rustup.rs)"
# build_exe WHAT CARGO-ARGS...: builds (release, feature verbs) and prints the executable's path.
build_exe() {
    local what=$1 exe json
    shift
    log "building $what (release, feature verbs)"
    # cargo's messages go to a temporary file, not $ROOT/target (absent with CARGO_TARGET_DIR).
    json=$(mktemp)
    (cd "$ROOT" && cargo build --release "$@" --message-format=json-render-diagnostics) \
        >"$json" || { rm -f "$json"; die "building $what failed"; }
    exe=$(grep "\"executable\":\"[^\"]*/$what\"" "$json" \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
    rm -f "$json"
    [ -x "$exe" ] || die "no $what executable found"
    printf '%s\n' "$exe"
}

has_device() {
    local p
    for p in /sys/class/infiniband/*/ports/*/state; do
        [ -e "$p" ] && grep -q ACTIVE "$p" && return 0
    done
    return 1
}
loco=$(build_exe loco -p loco-cli --features verbs --bin loco)
if [ "$mode" = hosts ]; then
    # A copy of the binary (in /tmp, which the VMs see): a build meanwhile must not swap it.
    out=$(mktemp)
    bin=$(mktemp -d)
    trap 'rm -rf "$out" "$bin"' EXIT
    cp "$loco" "$bin/loco"
    loco=$bin/loco
    "$SRC_DIR/cluster.sh" --vms 2 --timeout "${LOCO_VM_TIMEOUT:-1800}" -- \
        "$SRC_DIR/bench.sh" --cross-inside "$loco" "$iters" "$rounds" >"$out" 2>&1 || {
        cat "$out" >&2
        die "the two-host run failed"
    }
    grep -v '^\[vm0\] ' "$out" >&2 || true
    sed -n 's/^\[vm0\] //p' "$out"
    exit 0
fi
if [ "$mode" = native ] || { [ "$mode" = auto ] && has_device; }; then
    has_device || die "no active RDMA device on this host; use --vm"
    exec "$0" --inside "$loco" "$iters" "$rounds"
fi
exec "$SRC_DIR/vm.sh" --workdir "$ROOT" --timeout "${LOCO_VM_TIMEOUT:-900}" -- \
    "$SRC_DIR/bench.sh" --inside "$loco" "$iters" "$rounds"
