#!/usr/bin/env bash
# Counts the user-space instructions one 8-byte request + wait costs in loco and in perftest,
# on the same Soft-RoCE device, with valgrind's callgrind: a figure that does not move with the
# host's load, unlike a latency under qemu: for telling whether a change to the hot path made it
# leaner. On this project's VM (TCG) such instructions cost about 0.36 ns each, so they are a
# small part of the latency gap `loco bench ops --vs-perftest` reports (docs/verbs-notes.md,
# "Where the time goes").
#
# Usage: soft-roce-ci/profile-ops.sh [--loco PATH] [--ops "get rfaa put"] [-n N] [--keep DIR]
#   --loco PATH   the loco binary (default: target/release/loco, built with --features verbs)
#   --ops LIST    loco operations to count, each against its perftest tool (get: ib_read_lat,
#                 rfaa: ib_atomic_lat, put: ib_write_lat, whose iteration is a put each way)
#   -n N          requests of the longer run (default 1300; the shorter has N - 1000)
#   --keep DIR    keep callgrind's output files in DIR (callgrind_annotate reads them)
#
# Each program runs twice under callgrind, with N - 1000 and N requests; the difference of the
# two totals over 1000 is the count per request, start-up and teardown cancelled out. Both
# busy-poll their completion queue, so a request whose completion is late adds the spins of
# its wait (under valgrind the kernel's part is fast next to user code: rarely). Runs inside
# soft-roce-ci/vm.sh where this host has no RDMA device; needs valgrind (Debian: valgrind).
set -euo pipefail
. "${BASH_SOURCE[0]%/*}/lib.sh"
ROOT_DIR=$(cd "$SRC_DIR/.." && pwd)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

loco=$ROOT_DIR/target/release/loco ops="get rfaa put" n=1300 keep=
args=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --loco) loco=$(realpath "$2"); shift ;;
        --ops) ops=$2; shift ;;
        -n) n=$2; shift ;;
        --keep) keep=$(realpath -m "$2"); shift ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
case $n in '' | *[!0-9]*) die "-n takes a whole number, not '$n'" ;; esac
[ "$n" -gt 1000 ] || die "-n must be more than 1000"
[ -x "$loco" ] || die "no loco binary at $loco: cargo build --release -p loco-cli --features verbs"
need_cmd valgrind valgrind

dev=${LOCO_RDMA_DEVICE:-rxe0}
gid_index=${LOCO_GID_INDEX:-1}
if [ ! -e "/sys/class/infiniband/$dev" ]; then
    [ "${LOCO_PROFILE_OPS_IN_VM:-}" != 1 ] || die "RDMA device $dev missing even inside the VM"
    log "no RDMA device $dev here; running inside soft-roce-ci/vm.sh"
    exec "$SRC_DIR/vm.sh" --workdir "$ROOT_DIR" -e LOCO_PROFILE_OPS_IN_VM=1 -- \
        "$SRC_DIR/${0##*/}" "${args[@]+"${args[@]}"}"
fi
need_cmd ib_read_lat perftest

server=$(perftest_server "$dev" "$gid_index") || die "GID index $gid_index of $dev is not populated"

out=${keep:-$(mktemp -d)}
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT

# callgrind's total instruction count of one run (its output file's `totals:` line).
total() { awk '/^totals:/ { print $2; exit }' "$1"; }

# Per request: (total of the N run - total of the N-1000 run) / 1000.
per_request() { awk -v a="$(total "$1")" -v b="$(total "$2")" 'BEGIN { printf "%.0f", (b - a) / 1000 }'; }

# cg NAME ITERS CMD...: CMD under callgrind, its output file $out/NAME-ITERS.cg.
cg() {
    local name=$1 iters=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$out/$name-$iters.cg" "$@" \
        > "$out/$name-$iters.log" 2>&1 || { cat "$out/$name-$iters.log" >&2; die "$name failed"; }
}

printf '%-6s %-14s %12s %12s %7s\n' op perftest "loco instr" "perftest" ratio
for op in $ops; do
    case $op in
        get) tool=ib_read_lat ;;
        rfaa) tool=ib_atomic_lat ;;
        put) tool=ib_write_lat ;;
        *) die "unknown op '$op' (get, rfaa, put)" ;;
    esac
    for iters in $((n - 1000)) "$n"; do
        cg "loco-$op" "$iters" "$loco" bench ops --backend verbs --op "$op" --sizes 8 \
            --outstanding 1 --iters "$iters" --warmup 0 --json --no-plot
        "$tool" -d "$dev" -x "$gid_index" -F -n "$iters" -s 8 > "$out/$tool-$iters.server" 2>&1 &
        spid=$!
        sleep 1
        cg "$tool" "$iters" "$tool" -d "$dev" -x "$gid_index" -F -n "$iters" -s 8 "$server"
        wait "$spid" || true
    done
    l=$(per_request "$out/loco-$op-$((n - 1000)).cg" "$out/loco-$op-$n.cg")
    p=$(per_request "$out/$tool-$((n - 1000)).cg" "$out/$tool-$n.cg")
    printf '%-6s %-14s %12s %12s %7s\n' "$op" "$tool" "$l" "$p" \
        "$(awk -v l="$l" -v p="$p" 'BEGIN { if (p > 0) printf "%.2f", l / p; else print "-" }')"
done
echo "(user-space instructions per 8-byte request + wait, libibverbs and the provider included;" \
    "each side's count includes its sort of the latency samples at the end, 100-250 per request)"
