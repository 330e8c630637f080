#!/usr/bin/env bash
# Measure the reference latencies of the RDMA device with perftest (loopback: server and client
# on the same device), so loco's own latencies can be compared with them IN THE SAME BOOT:
# under qemu/TCG emulation sets the speed, so only ratios mean anything.
#
# Usage: bench-perftest.sh [-n ITERS] [--retries N] [--device DEV] [--gid-index N] [TEST...]
#   TEST      ib_write_lat, ib_read_lat, ib_atomic_lat (default: all three)
#   -n        iterations per test (default 1000)
#   --retries extra runs allowed per test when a run fails or prints `inf` (default 3)
#   --device, --gid-index   default $LOCO_RDMA_DEVICE / $LOCO_GID_INDEX, else rxe0 / 1
#   --serve   across hosts: run only the servers, one test after the other (ports 18601...),
#             and print nothing; the other host runs the same command with --peer
#   --peer A  across hosts: run only the clients, towards the --serve host at address A
#             (each retried until its server listens), and print the results as below
#
# When the device does not exist here, the script re-runs itself inside soft-roce-ci/vm.sh.
# Output (stdout): a table, then machine-readable lines, one of each kind per test
#   perftest <name> <t_avg_us>          perftest's own t_avg, as printed
#   perftest-rtt <name> <rtt_us>        t_avg as a full round trip
#   perftest-typical <name> <t_us>      t_typical (median), as printed: under TCG rare
#                                       multi-millisecond stalls can dominate t_avg
# ib_write_lat reports HALF a round trip (ping-pong of two writes, divided by two);
# ib_read_lat and ib_atomic_lat report the full round trip. Exit status 1 if a test never
# produced a number.
set -euo pipefail
# shellcheck source=lib.sh
. "${BASH_SOURCE[0]%/*}/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

iters=1000 retries=3 role=loopback peer=
dev=${LOCO_RDMA_DEVICE:-rxe0}
gid_index=${LOCO_GID_INDEX:-1}
tests=()
args=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        -n) iters=$2; shift ;;
        --retries) retries=$2; shift ;;
        --device) dev=$2; shift ;;
        --gid-index) gid_index=$2; shift ;;
        --serve) role=serve ;;
        --peer) peer=$2; role=client; shift ;;
        -h | --help) usage 0 ;;
        ib_write_lat | ib_read_lat | ib_atomic_lat) tests+=("$1") ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
[ "${#tests[@]}" -gt 0 ] || tests=(ib_write_lat ib_read_lat ib_atomic_lat)

if [ ! -e "/sys/class/infiniband/$dev" ]; then
    [ "${LOCO_BENCH_PERFTEST_IN_VM:-}" != 1 ] || die "RDMA device $dev missing even inside the VM"
    log "no RDMA device $dev here; running inside soft-roce-ci/vm.sh"
    exec "$SRC_DIR/vm.sh" -e LOCO_BENCH_PERFTEST_IN_VM=1 -- "$SRC_DIR/${0##*/}" "${args[@]+"${args[@]}"}"
fi
need_cmd ib_write_lat perftest
need_cmd ss iproute2

server=$(perftest_server "$dev" "$gid_index") || die "GID index $gid_index of $dev is not populated"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=18515

# "t_avg t_typical" of a perftest result: find the header naming t_avg[usec], then the values
# at the same positions in the first row that starts with a number.
parse_result() {
    awk '
        /t_avg/ {
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^t_avg/) avg = i
                if ($i ~ /^t_typical/) typ = i
            }
            next
        }
        avg && typ && $1 ~ /^[0-9]+$/ && NF >= avg && NF >= typ { print $avg, $typ; exit }
    ' "$1"
}

# opts_for TEST PORT: perftest's options for TEST on PORT, into the array `opts`.
opts_for() {
    opts=(-d "$dev" -x "$gid_index" -F -n "$iters" -p "$2")
    [ "$1" != ib_atomic_lat ] || opts+=(-A FETCH_AND_ADD)
}

# client_result TEST FILE: "t_avg t_typical" from a client's output, or fails.
client_result() {
    local t=$1 out=$2 value
    # TSC calibration under TCG sometimes fails ("Correlation coefficient r^2 < 0.9") and the
    # results come out as inf.
    if grep -qw inf "$out"; then
        log "$t printed inf (TSC calibration failed)"
        return 1
    fi
    value=$(parse_result "$out")
    [ -n "$value" ] || { log "$t: no t_avg in its output:"; cat "$out" >&2; return 1; }
    printf '%s\n' "$value"
}

# run_once TEST PORT: one loopback run (server in the background, client here); prints
# "t_avg t_typical" or fails. Each run gets its own port so a stuck server cannot block the next attempt.
run_once() {
    local t=$1 port=$2 spid tries opts
    opts_for "$t" "$port"
    timeout 120 "$t" "${opts[@]}" >"$tmp/server" 2>&1 &
    spid=$!
    # Wait for the server's TCP listener rather than sleeping a fixed time (boots are slow).
    tries=300
    until [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; do
        if ! kill -0 "$spid" 2>/dev/null || [ "$tries" -eq 0 ]; then
            log "$t server did not start: $(tail -n 3 "$tmp/server")"
            kill "$spid" 2>/dev/null || true
            wait "$spid" 2>/dev/null || true
            return 1
        fi
        sleep 0.1
        tries=$((tries - 1))
    done
    if ! timeout 120 "$t" "${opts[@]}" "$server" >"$tmp/client" 2>&1; then
        log "$t client failed: $(tail -n 3 "$tmp/client")"
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        return 1
    fi
    wait "$spid" 2>/dev/null || true
    client_result "$t" "$tmp/client"
}

# peer_once TEST PORT: the client of a run across hosts, towards $peer; retried (up to 50 s)
# until the server there listens. Prints "t_avg t_typical" or fails.
peer_once() {
    local t=$1 port=$2 opts try
    opts_for "$t" "$port"
    for try in $(seq 200); do
        if timeout 300 "$t" "${opts[@]}" "$peer" >"$tmp/client" 2>&1; then
            client_result "$t" "$tmp/client"
            return
        fi
        sleep 0.25
    done
    log "$t client towards $peer failed $try times: $(tail -n 3 "$tmp/client")"
    return 1
}

if [ "$role" = serve ]; then
    k=0
    for t in "${tests[@]}"; do
        k=$((k + 1))
        opts_for "$t" $((18600 + k))
        timeout 300 "$t" "${opts[@]}" >/dev/null 2>&1 || log "$t server failed"
    done
    exit 0
fi

declare -A result typical
failed=0
k=0
for t in "${tests[@]}"; do
    result[$t]=
    k=$((k + 1))
    if [ "$role" = client ]; then
        if v=$(peer_once "$t" $((18600 + k))); then
            result[$t]=${v% *}
            typical[$t]=${v#* }
        fi
        [ -n "${result[$t]}" ] || failed=1
        continue
    fi
    for attempt in $(seq 0 "$retries"); do
        port=$((port + 1))
        if v=$(run_once "$t" "$port"); then
            result[$t]=${v% *}
            typical[$t]=${v#* }
            break
        fi
        [ "$attempt" -lt "$retries" ] || log "$t: giving up after $((retries + 1)) runs"
    done
    [ -n "${result[$t]}" ] || failed=1
done

rtt() {
    case $1 in
        ib_write_lat) awk -v v="$2" 'BEGIN { printf "%.2f", 2 * v }' ;;
        *) printf '%s' "$2" ;;
    esac
}
printf '%-14s %11s %15s %15s  %s\n' test 't_avg [us]' 't_typical [us]' 'avg as RTT [us]' \
    "(device $dev, gid $gid_index, $iters iterations)"
for t in "${tests[@]}"; do
    v=${result[$t]:-failed}
    r=failed
    [ "$v" = failed ] || r=$(rtt "$t" "$v")
    printf '%-14s %11s %15s %15s\n' "$t" "$v" "${typical[$t]:-failed}" "$r"
done
for t in "${tests[@]}"; do
    [ -n "${result[$t]}" ] || continue
    printf 'perftest %s %s\n' "$t" "${result[$t]}"
done
for t in "${tests[@]}"; do
    [ -n "${result[$t]}" ] || continue
    printf 'perftest-rtt %s %s\n' "$t" "$(rtt "$t" "${result[$t]}")"
done
for t in "${tests[@]}"; do
    [ -n "${result[$t]}" ] || continue
    printf 'perftest-typical %s %s\n' "$t" "${typical[$t]}"
done
exit "$failed"
