#!/usr/bin/env bash
# The multi-host cases of the verbs suite, on a Soft-RoCE cluster of 3 VMs (cluster.sh): RoCE
# packets between separate kernels, and the faults that need separate hosts.
#
# Usage: soft-roce-ci/cluster-suite.sh [SCENARIO...]   (default: all, in this order)
#   counter    examples/distributed_counter, one process per VM: exact totals; every VM's rxe
#              packet counters are printed (the packets crossed between VMs)
#   checks     examples/cluster_checks: the locks (NLock, WLock + gf, SLock: exact counters,
#              no overlapping critical sections), sv publication with bcast and gf (no stale
#              read), SC faa_sc (every value handed out once), one process per VM
#   killed     examples/fault_node, victim n2 at faa-wait; its whole VM is killed (qemu SIGKILL:
#              no FIN, no RST). n0 and n1 must find n2 dead by heartbeats, finish, and lose
#              none of their FAAs; the detection time is printed
#   partition  the same, but n2's VM is cut off the segment by the hub for 6 s, then healed. The
#              survivors must behave as above; n2, probing after the heal, must find its FAAs
#              towards them refused (fenced out), none landed
#   dropped    the same with the drop made inside the victim's own kernel: once n2 is at
#              faa-wait, its VM runs `tc qdisc add dev eth0 root netem loss 100%` (every packet
#              it sends is dropped), removes it 6 s later, and n2 probes as above
#   async      examples/aio_bench across 2 VMs (n1 serves, n0 measures): async puts, one task
#              and 16 tasks on one context, whose waits outlast the spin polls and sleep on the
#              completion channel (a lost wake-up would stall them until the backstop); must
#              finish with waits that slept; the latency and throughput ratios are printed,
#              and 16 tasks taking turns at an NLock on n1 with local handover against
#              without (the lock throughput ratio; printed, not asserted)
#   netem      distributed_counter with every VM's eth0 under `tc netem` (delay 2 ms ± 1 ms,
#              so packets reorder, and 2% loss each way): rxe retransmits, so the totals must
#              be exact; a typed error is tolerated (reported), wrong data is not
# Every scenario runs once per bootstrap in $LOCO_BOOTSTRAPS (default "tcp rdma_cm"): queue
# pairs connected over the TCP rendezvous, then by the RDMA connection manager
# (LOCO_BOOTSTRAP=rdma_cm); both must pass the same cases.
# Exit status: 0 if every scenario passed.
#
# Needs the debug builds of the examples with the verbs feature (run.sh builds them):
#   cargo build -p loco --features verbs,tokio --example distributed_counter --example fault_node \
#       --example cluster_checks --example aio_bench
# Cost: each scenario boots 3 VMs (about 10-20 s on 2 cores) and runs 10-40 s; about 100 s
# per bootstrap for the seven.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }
case ${1:-} in -h | --help) usage 0 ;; esac

ROOT=$(cd "$SRC_DIR/.." && pwd)
cd "$ROOT"
COUNTER=target/debug/examples/distributed_counter
FAULT=target/debug/examples/fault_node
CHECKS=target/debug/examples/cluster_checks
AIO=target/debug/examples/aio_bench
for b in "$COUNTER" "$FAULT" "$CHECKS" "$AIO"; do
    [ -x "$b" ] || die "$b missing: cargo build -p loco --features verbs,tokio --example ${b##*/}"
done
CLUSTER=$SRC_DIR/cluster.sh
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters

# What each VM prints after its command: its rxe packet counters.
counters_tail='s=$?; echo "rxe0 packets: sent $(cat '$HW'/sent_pkts) received $(cat '$HW'/rcvd_pkts) retransmitted $(cat '$HW'/duplicate_request 2>/dev/null || echo ?)/$(cat '$HW'/rcvd_seq_err 2>/dev/null || echo ?) (duplicate requests / sequence errors)"; exit $s'

# vm_exit OUT I: VM I's exit status from cluster.sh's output.
vm_exit() { sed -n "s/^vm$2: exit \([0-9]*\)$/\1/p" "$1"; }

scenario_counter() {
    local out=$1
    "$CLUSTER" --vms 3 -- bash -c "$COUNTER --ops 300 --timeout 120; $counters_tail" >"$out" 2>&1 || true
    local rc=0 i
    for i in 0 1 2; do
        grep -q "^\[vm$i\] n$i: counter .* OK" "$out" || { echo "   n$i: no exact total"; rc=1; }
        [ "$(vm_exit "$out" "$i")" = 0 ] || { echo "   vm$i: exit $(vm_exit "$out" "$i")"; rc=1; }
        # Every VM must have sent and received packets of its own: they crossed the segment.
        grep -Eq "^\[vm$i\] rxe0 packets: sent [1-9][0-9]* received [1-9]" "$out" \
            || { echo "   vm$i: no RoCE packets counted"; rc=1; }
    done
    return "$rc"
}

scenario_checks() {
    local out=$1 rc=0 i
    "$CLUSTER" --vms 3 -- "$CHECKS" --rounds 20 >"$out" 2>&1 || true
    for i in 0 1 2; do
        grep -q "^\[vm$i\] n$i: checks OK" "$out" || { echo "   n$i: no 'checks OK'"; rc=1; }
        [ "$(vm_exit "$out" "$i")" = 0 ] || { echo "   vm$i: exit $(vm_exit "$out" "$i")"; rc=1; }
    done
    for what in 'nlock counter 60 (expected 60) OK' 'wlock counter 60 (expected 60) OK' \
        'slock counter 60 (expected 60) OK' 'each of 0..60 once: OK'; do
        grep -qF "$what" "$out" || { echo "   missing: $what"; rc=1; }
    done
    return "$rc"
}

# fault_scenario OUT DURING [VICTIM-ARGS... | -- CMD...]: fault_node on 3 VMs (or CMD on each),
# victim n2 at faa-wait; DURING runs on the host once n2's output has a line matching
# $FAULT_MARK (default: its faa-wait line). n0 and n1 must pass their survivor check.
fault_scenario() {
    local out=$1 during=$2 rc=0 i t cmd
    # The line of n2's output after which the fault counts as made (detection is timed from it).
    local mark=${FAULT_MARK:-^n2: at faa-wait}
    shift 2
    # ARGS for fault_node, or `-- CMD...` to run instead of it.
    if [ "${1:-}" = -- ]; then
        shift
        cmd=("$@")
    else
        cmd=("$FAULT" --victim 2 --at faa-wait --timeout 20 --work-ms 60000 "$@")
    fi
    LOCO_PEER_TIMEOUT_MS=2000 "$CLUSTER" --vms 3 --during "
        for _ in \$(seq 900); do grep -q '$mark' \"\$dir/out-2\" && break; sleep 0.1; done
        t_fault=\$(date +%s%3N)
        ( $during ) &
        # Detection as the host sees it: when each survivor's console says so.
        for i in 0 1; do
            for _ in \$(seq 300); do grep -q \"^n\$i: peer n2 dead\" \"\$dir/out-\$i\" && break; sleep 0.05; done
            echo \"n\$i \$((\$(date +%s%3N) - t_fault))\" >>'$out.t'
        done
        wait" \
        -- "${cmd[@]}" >"$out" 2>&1 || true
    for i in 0 1; do
        grep -q "^\[vm$i\] n$i: survivor check OK" "$out" || { echo "   n$i: no 'survivor check OK'"; rc=1; }
        [ "$(vm_exit "$out" "$i")" = 0 ] || { echo "   vm$i: exit $(vm_exit "$out" "$i")"; rc=1; }
        if grep -q "^\[vm$i\] n$i: peer n2 dead at " "$out"; then
            t=$(sed -n "s/^n$i \([0-9]*\)$/\1/p" "$out.t" 2>/dev/null || true)
            echo "   n$i reported n2 dead ${t:-?} ms after the fault (host clock, from its console)"
        else
            echo "   n$i never reported n2 dead"
            rc=1
        fi
    done
    rm -f "$out.t"
    return "$rc"
}

scenario_killed() {
    fault_scenario "$1" 'kill_vm 2'
}

scenario_partition() {
    local out=$1 rc=0
    fault_scenario "$out" "cut_vm 2; sleep ${LOCO_CUT_SECS:-6}; heal_vm 2" --probe-after-ms $(( (${LOCO_CUT_SECS:-6} + 6) * 1000 )) || rc=1
    if ! grep -q '^\[vm2\] n2: resumed after a stop: towards' "$out" || grep -q 'LANDED' "$out"; then
        echo "   n2, after the heal: its FAAs were not all refused (or it never tried)"
        rc=1
    else
        echo "   n2 after the heal: $(grep -c '^\[vm2\] n2: resumed after a stop: towards' "$out") FAAs refused (fenced out)"
    fi
    return "$rc"
}

scenario_dropped() {
    local out=$1 rc=0
    # n2's VM drops its own packets with netem (tc inside the VM); n0 and n1 run plainly.
    local victim="$FAULT --victim 2 --at faa-wait --timeout 20 --work-ms 60000 --probe-after-ms 12000"
    local script='
        if [ "$LOCO_NODE_ID" != 2 ]; then exec '"$victim"'; fi
        '"$victim"' | tee /tmp/n2.out &
        for _ in $(seq 900); do grep -q "^n2: at faa-wait" /tmp/n2.out 2>/dev/null && break; sleep 0.1; done
        grep -q "^n2: at faa-wait" /tmp/n2.out || { echo "n2 never reached faa-wait"; kill %1; exit 1; }
        tc qdisc add dev eth0 root netem loss 100% && echo "n2: eth0 drops every packet it sends"
        sleep 6
        tc qdisc del dev eth0 root && echo "n2: eth0 sends again"
        wait'
    FAULT_MARK='^n2: eth0 drops every packet' fault_scenario "$out" ':' -- bash -c "$script" || rc=1
    if ! grep -q '^\[vm2\] n2: eth0 drops every packet' "$out"; then
        echo "   the drop was never put in place"
        rc=1
    fi
    if ! grep -q '^\[vm2\] n2: resumed after a stop: towards' "$out" || grep -q 'LANDED' "$out"; then
        echo "   n2, after the drop ended: its FAAs were not all refused (or it never tried)"
        rc=1
    fi
    return "$rc"
}

scenario_netem() {
    local out=$1 rc=0 i
    local qdisc='tc qdisc add dev eth0 root netem delay 2ms 1ms loss 2%'
    "$CLUSTER" --vms 3 -- bash -c "$qdisc && tc qdisc show dev eth0 | sed 's/^/qdisc: /'; $COUNTER --ops 200 --timeout 120; $counters_tail" >"$out" 2>&1 || true
    for i in 0 1 2; do
        if grep -q "^\[vm$i\] n$i: counter .* OK" "$out"; then
            continue
        elif grep -q "^\[vm$i\] n$i: counter .*LOST\|^\[vm$i\] n$i: .*WRONG" "$out"; then
            echo "   n$i: WRONG DATA under netem"
            rc=1
        elif grep -q "^\[vm$i\] n$i: error: " "$out"; then
            echo "   n$i ended with a typed error (tolerated): $(grep -m1 "^\[vm$i\] n$i: error: " "$out")"
        else
            echo "   n$i: neither a total nor an error"
            rc=1
        fi
    done
    grep -q '^\[vm0\] qdisc: .*netem' "$out" || { echo "   netem was not in place"; rc=1; }
    return "$rc"
}

scenario_async() {
    local out=$1 rc=0 i
    LOCO_BACKEND=verbs "$CLUSTER" --vms 2 -- "$AIO" --iters 200 --rounds 2 --tasks 16 >"$out" 2>&1 || true
    for i in 0 1; do
        [ "$(vm_exit "$out" "$i")" = 0 ] || { echo "   vm$i: exit $(vm_exit "$out" "$i")"; rc=1; }
    done
    grep -q '^\[vm0\] backend verbs' "$out" || { echo "   n0 did not measure on verbs"; rc=1; }
    grep -Eq '^\[vm0\]   waits that slept on the completion channel: [1-9]' "$out" \
        || { echo "   no wait slept on the completion channel"; rc=1; }
    return "$rc"
}

scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(counter checks killed partition dropped async netem)
for s in "${scenarios[@]}"; do
    declare -F "scenario_$s" >/dev/null || die "no scenario '$s' (counter checks killed partition dropped async netem)"
done
runs=()
for b in ${LOCO_BOOTSTRAPS:-tcp rdma_cm}; do
    case $b in tcp | rdma_cm) ;; *) die "unknown bootstrap '$b' in LOCO_BOOTSTRAPS (tcp rdma_cm)" ;; esac
    for s in "${scenarios[@]}"; do runs+=("$b/$s"); done
done
passed=0 failed=0 bad=() t0=$(now)
for run in "${runs[@]}"; do
    export LOCO_BOOTSTRAP=${run%%/*}
    s=${run#*/}
    echo "-- cluster of VMs: $s (LOCO_BOOTSTRAP=$LOCO_BOOTSTRAP)"
    out=$(mktemp)
    t1=$(now)
    if "scenario_$s" "$out"; then
        passed=$((passed + 1))
        verdict=ok
    else
        failed=$((failed + 1))
        bad+=("$s ($LOCO_BOOTSTRAP)")
        verdict=FAILED
    fi
    grep -E '^\[vm[0-9]\] (n[0-9]: (counter|survivor|peer|resumed|joined|error|locks|sv|sc|checks|eth0)|rxe0 packets|qdisc|  (latency|throughput|waits|NLock|lock throughput))|^cluster.sh: (hub|killing|cut|vm)' "$out" \
        | sed 's/^/   | /' || true
    [ "$verdict" = ok ] && [ -z "${LOCO_CLUSTER_VERBOSE:-}" ] || sed "s/^/   ! /" "$out"
    echo "   $s ($LOCO_BOOTSTRAP): $verdict ($(elapsed "$t1") s)"
    rm -f "$out"
done
echo "== cluster suite: $passed passed; $failed failed in $(elapsed "$t0") s"
[ "$failed" -eq 0 ] || { printf '   FAILED: %s\n' "${bad[@]}"; exit 1; }
