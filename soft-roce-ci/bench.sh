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
#   --rounds  rounds of perftest then loco (default 5; single host only)
#
# --hosts 2: across two hosts, on two VMs of soft-roce-ci/cluster.sh (each with its own rxe
# device, packets crossing the in-host Ethernet segment): perftest's server on VM 0 and client
# on VM 1 (10.77.0.1), through bench-perftest.sh, and loco's verbs_latency example as two
# processes, n0 on VM 0 measuring towards n1 on VM 1; one round, a table of both and their
# ratio (put/get/rfaa only).
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

# table (--hosts 2): the ratio table from perftest's and verbs_latency's machine-readable lines
# on stdin.
table() {
    awk -v dev="${LOCO_RDMA_DEVICE:-default}" -v kern="$(uname -r)" '
        BEGIN {
            tool["put+wait"] = "ib_write_lat"; tool["get+wait"] = "ib_read_lat"; tool["rfaa+wait"] = "ib_atomic_lat"
        }
        # perftest full round trips: ib_write_lat reports half of one, so it is doubled.
        $1 == "perftest" { pa[$2] = ($2 == "ib_write_lat" ? 2 : 1) * $3 }
        $1 == "perftest-typical" { pt[$2] = ($2 == "ib_write_lat" ? 2 : 1) * $3 }
        $1 == "RESULT" { lm[$2] = $5; la[$2] = $4; ops[++n] = $2 }
        END {
            printf "\nLatency on %s (kernel %s), 8-byte operations, full round trips, µs\n", dev, kern
            printf "%-10s | %-16s %9s %9s | %9s %9s | %14s %12s\n", "loco op", "perftest", "median", "avg", "median", "avg", "loco/perftest", "(avg ratio)"
            for (i = 1; i <= n; i++) {
                o = ops[i]; t = tool[o]
                name = t (t == "ib_write_lat" ? " x2" : "")
                ratio = (pt[t] > 0) ? sprintf("%.2f", lm[o] / pt[t]) : "n/a"
                aratio = (pa[t] > 0) ? sprintf("%.2f", la[o] / pa[t]) : "n/a"
                printf "%-10s | %-16s %9.2f %9.2f | %9.2f %9.2f | %14s %12s\n", o, name, pt[t], pa[t], lm[o], la[o], ratio, aratio
            }
            print "(perftest columns: t_typical and t_avg; loco columns: median and average of put/get/rfaa + wait)"
        }'
}

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

# cross_inside EXAMPLE ITERS: one VM of the two-host run (role from LOCO_NODE_ID): perftest's
# servers (VM 0) or clients (VM 1, printing the machine-readable lines), through
# bench-perftest.sh --serve / --peer, then verbs_latency as one of two processes.
cross_inside() {
    local example=$1 iters=$2
    if [ "${LOCO_NODE_ID:?}" = 0 ]; then
        "$SRC_DIR/bench-perftest.sh" -n "$iters" --serve
    else
        "$SRC_DIR/bench-perftest.sh" -n "$iters" --peer 10.77.0.1 | grep '^perftest' \
            || log "perftest gave no numbers"
    fi
    "$example" --iters "$iters" --warmup 200
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
if [ "$mode" = hosts ]; then
    example=$(build_exe verbs_latency -p loco --features verbs --example verbs_latency)
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    "$SRC_DIR/cluster.sh" --vms 2 --timeout "${LOCO_VM_TIMEOUT:-900}" -- \
        "$SRC_DIR/bench.sh" --cross-inside "$example" "$iters" >"$out" 2>&1 || {
        cat "$out" >&2
        die "the two-host run failed"
    }
    grep -v '^\[vm[01]\] \(perftest\|RESULT\)' "$out" >&2 || true
    echo "(across two VMs: perftest server on VM 0, client on VM 1; loco n0 on VM 0 -> n1 on VM 1)"
    sed -n 's/^\[vm1\] \(perftest.*\)$/\1/p; s/^\[vm0\] \(RESULT .*\)$/\1/p' "$out" | table
    exit 0
fi
loco=$(build_exe loco -p loco-cli --features verbs --bin loco)
if [ "$mode" = native ] || { [ "$mode" = auto ] && has_device; }; then
    has_device || die "no active RDMA device on this host; use --vm"
    exec "$0" --inside "$loco" "$iters" "$rounds"
fi
exec "$SRC_DIR/vm.sh" --workdir "$ROOT" --timeout "${LOCO_VM_TIMEOUT:-900}" -- \
    "$SRC_DIR/bench.sh" --inside "$loco" "$iters" "$rounds"
