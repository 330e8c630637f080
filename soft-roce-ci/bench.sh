#!/usr/bin/env bash
# Latency of loco-rs on a Soft-RoCE device next to perftest on the same device, in one run (one
# VM boot where the host has no RDMA): ib_write_lat, ib_read_lat, ib_atomic_lat (8 bytes) and
# loco's put+wait, get+wait, rfaa+wait (examples/verbs_latency.rs, release build). Prints a
# table of both and their ratio.
#
# Usage: soft-roce-ci/bench.sh [--native | --vm] [--iters N]   (default N = 2000)
#
# Reading the table: every row compares full round trips. ib_write_lat is a ping-pong and
# reports half a round trip, so its figure is doubled; ib_read_lat and ib_atomic_lat report the
# full round trip, as put+wait, get+wait and rfaa+wait do (the wait returns once the completion,
# which follows the ACK or the response, is polled). The ratio uses medians (perftest's
# t_typical): under qemu's TCG averages are dominated by rare multi-millisecond stalls; averages
# are shown too. Absolute numbers under emulation mean little; the ratio is the result.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

ROOT=$(cd "$SRC_DIR/.." && pwd)

# perf TOOL ITERS PORT: runs TOOL's server and client on this host's device; prints
# "t_typical t_avg" (µs) of the client, retrying when perftest fails or prints inf (its TSC
# calibration fails now and then under TCG).
perf() {
    local tool=$1 iters=$2 port=$3 args out attempt line server
    out=$(mktemp)
    for attempt in 1 2 3 4; do
        args=(-F -n "$iters" -p "$port")
        [ "$tool" = ib_atomic_lat ] || args+=(-s 8) # atomics are 8 bytes already
        [ -z "${LOCO_RDMA_DEVICE:-}" ] || args+=(-d "$LOCO_RDMA_DEVICE")
        [ -z "${LOCO_GID_INDEX:-}" ] || args+=(-x "$LOCO_GID_INDEX")
        timeout 120 "$tool" "${args[@]}" >/dev/null 2>&1 &
        server=$!
        sleep 0.5
        timeout 120 "$tool" "${args[@]}" 127.0.0.1 >"$out" 2>&1 || true
        wait "$server" 2>/dev/null || true
        # The result line follows the header line holding "#bytes".
        line=$(awk '/#bytes/ { getline; print; exit }' "$out")
        # Columns: bytes iterations t_min t_max t_typical t_avg ...
        if awk -v l="$line" 'BEGIN { n = split(l, f); exit !(n >= 6 && f[5] + 0 > 0 && f[6] ~ /^[0-9.]+$/) }'; then
            awk -v l="$line" 'BEGIN { split(l, f); print f[5], f[6] }'
            rm -f "$out"
            return 0
        fi
        log "$tool attempt $attempt gave no usable result; retrying"
        port=$((port + 1))
    done
    cat "$out" >&2
    rm -f "$out"
    echo "0 0"
}

inside() {
    local example=$1 iters=$2 w r a loco
    if [ "$(id -u)" -eq 0 ] && [ -e /sys/class/net/lo ]; then
        ip link set lo up 2>/dev/null || true
    fi
    need_cmd ib_write_lat perftest
    log "perftest on ${LOCO_RDMA_DEVICE:-the first device}, $iters iterations each"
    w=$(perf ib_write_lat "$iters" 18515)
    r=$(perf ib_read_lat "$iters" 18525)
    a=$(perf ib_atomic_lat "$iters" 18535)
    log "loco ($example)"
    loco=$("$example" --iters "$iters" --warmup 200)
    echo "$loco" | grep -v '^RESULT' >&2
    awk -v w="$w" -v r="$r" -v a="$a" -v dev="${LOCO_RDMA_DEVICE:-default}" -v kern="$(uname -r)" '
        BEGIN {
            split(w, W); split(r, R); split(a, A)
            # perftest full round trips: write doubled (it reports half a round trip).
            pt["put+wait"] = 2 * W[1]; pa["put+wait"] = 2 * W[2]; pn["put+wait"] = "ib_write_lat x2"
            pt["get+wait"] = R[1];     pa["get+wait"] = R[2];     pn["get+wait"] = "ib_read_lat"
            pt["rfaa+wait"] = A[1];    pa["rfaa+wait"] = A[2];    pn["rfaa+wait"] = "ib_atomic_lat"
        }
        /^RESULT/ { lm[$2] = $5; la[$2] = $4; ops[++n] = $2 }
        END {
            printf "\nLatency on %s (kernel %s), 8 bytes, full round trips, µs\n", dev, kern
            printf "%-10s | %-16s %9s %9s | %9s %9s | %14s %12s\n", "loco op", "perftest", "median", "avg", "median", "avg", "loco/perftest", "(avg ratio)"
            for (i = 1; i <= n; i++) {
                o = ops[i]
                ratio = (pt[o] > 0) ? sprintf("%.2f", lm[o] / pt[o]) : "n/a"
                aratio = (pa[o] > 0) ? sprintf("%.2f", la[o] / pa[o]) : "n/a"
                printf "%-10s | %-16s %9.2f %9.2f | %9.2f %9.2f | %14s %12s\n", o, pn[o], pt[o], pa[o], lm[o], la[o], ratio, aratio
            }
            print "(perftest columns: t_typical and t_avg; loco columns: median and average of put/get/rfaa + wait)"
        }' <<<"$loco"
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit $?
fi

mode=auto
iters=2000
while [ $# -gt 0 ]; do
    case $1 in
        --native) mode=native ;;
        --vm) mode=vm ;;
        --iters) [ $# -ge 2 ] || usage 2 >&2; iters=$2; shift ;;
        --iters=*) iters=${1#*=} ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
case $iters in '' | *[!0-9]*) die "--iters wants a number, got '$iters'" ;; esac

need_cmd cargo "rustup (https://rustup.rs)"
log "building examples/verbs_latency (release, feature verbs)"
(cd "$ROOT" && cargo build --release -p loco --features verbs --example verbs_latency \
    --message-format=json-render-diagnostics) >"$ROOT/target/bench-build.json" \
    || die "building examples/verbs_latency failed"
example=$(grep '"executable":"[^"]*verbs_latency"' "$ROOT/target/bench-build.json" \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$example" ] || die "no verbs_latency executable found"

has_device() {
    local p
    for p in /sys/class/infiniband/*/ports/*/state; do
        [ -e "$p" ] && grep -q ACTIVE "$p" && return 0
    done
    return 1
}
if [ "$mode" = native ] || { [ "$mode" = auto ] && has_device; }; then
    has_device || die "no active RDMA device on this host; use --vm"
    exec "$0" --inside "$example" "$iters"
fi
exec "$SRC_DIR/vm.sh" --workdir "$ROOT" --timeout "${LOCO_VM_TIMEOUT:-900}" -- \
    "$SRC_DIR/bench.sh" --inside "$example" "$iters"
