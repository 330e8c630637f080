#!/usr/bin/env bash
# Build loco-rs's verbs test suite and the backend-generic behavioural suites, and run them on a
# real Soft-RoCE (rdma_rxe) device: natively where the kernel has one (or can load rdma_rxe), else
# inside the qemu VM of vm.sh. Prints each test binary's summary and time and a total, and exits
# with the suite's status (0: all passed).
#
# Usage: soft-roce-ci/run.sh [--native | --vm] [--no-example] [-- TEST-ARGS...]
#   --native      run on this host's RDMA device (create rxe0 over a dummy netdev if there is
#                 none and rdma_rxe can be loaded; needs root)
#   --vm          run in the VM (soft-roce-ci/vm.sh) even if the host could do it natively
#   --no-example  skip the multi-process runs of examples/distributed_counter and fault_node
#   TEST-ARGS     passed to every test binary (e.g. a name filter)
#
# What runs, with LOCO_BACKEND=verbs (so the backend-generic tests, which build their clusters
# with loco_rdmawait::testing / ClusterBuilder::backend_from_env, use the device):
#   - of the packages in $LOCO_VERBS_PACKAGES (default: loco-rdmawait loco-rdmawaitrmw loco-sv
#     loco-locks loco-sc), every integration-test binary whose target name starts with `verbs`
#     (the verbs-only tests), plus the backend-generic ones matched by the regex in
#     $LOCO_VERBS_TESTS (target names; default: $DEFAULT_TESTS below, i.e. the litmus shapes of
#     rdmawait, rdmawaitrmw and sc, remote RMW contention, the per-QP ordering property, sv, the
#     Fig. 8 shapes, the lock counters and API, SC linearizability, ported structures, smoke and
#     bad input; empty: verbs-only targets);
#   - `loco litmus run --backend verbs` over every tests/litmus/*.litmus ($LOCO_LITMUS_RUNS runs
#     each, default 20): no outcome the model forbids may be observed;
#   - examples/distributed_counter as 3 processes (exact totals), and again with one process
#     killed mid-run (the others must fail with "peer n2 is not responding" within 15 s);
#   - examples/kv_service (feature tokio) as 3 server processes answering TCP clients: every
#     read right; after n2's SIGKILL, n2's keys refused as "owned by n2, which is dead" and the
#     others served (~10 s);
#   - fault injection with examples/fault_node (3 processes with a cluster key, n2 the victim,
#     peer timeout 2 s): kill -9 of n2 between FAAs and their wait (meanwhile a stranger with
#     the wrong key tries to join and a fuzzing client sends 300 connections of random bytes to
#     n0's rendezvous port), inside an NLock critical section, inside gf; and SIGSTOP of n2 (a
#     partition without FIN: only heartbeats tell). Survivors must see n2 dead, finish, and
#     find every FAA they saw complete counted ("survivor check OK"); detection times are
#     printed. Then the rejoin: n2 killed inside the critical section and started again under
#     its node id; it rejoins as a new incarnation, the survivors' old context reports the
#     restart, and all three complete lock-protected increments that n0 finds all counted.
#     ~1.5 min. $LOCO_SCENARIOS (space-separated function names) runs only some of these
#     scenarios; LOCO_LITMUS_RUNS=0 skips the litmus runs; LOCO_VS_SIM=0 skips
#     `loco bench locks --vs-sim` (the rxe profile's predictions beside rxe0's figures);
#     LOCO_VS_RAW=0 skips `loco bench ops --vs-raw` (loco's path beside the bare calls);
#   - on a host without a device (VM path), first the `smoke` test on the host itself: it must
#     fail, with the backend's explanation of how to get a device, not pass silently; and (as
#     root) again with libibverbs masked: it must say what to install.
# Device: LOCO_RDMA_DEVICE / LOCO_GID_INDEX if set (vm.sh sets rxe0 / 1), else the first active.
# Cost (2 cores, TCG): building with `verbs` takes ~4 min from a cold target directory (seconds
# when cached); the VM run ~2.5 min (boot ~4 s; the backend-generic suites ~2 min of it, sized for
# ~10-25 us per RDMA operation: keep the whole run under ~6 min when adding tests).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

ROOT=$(cd "$SRC_DIR/.." && pwd)
STATE_DIR=$ROOT/target/soft-roce-ci

# ----- inside: run the built suite on the device (in the VM, or natively) --------------------

# run_inside LIST EXAMPLE -- ARGS: LIST holds one test executable per line; EXAMPLE is the
# distributed_counter binary or "-".
run_inside() {
    local list=$1 example=$2
    shift 3
    export LOCO_BACKEND=verbs
    # The rendezvous of the multi-process tests uses localhost, which a fresh VM lacks.
    if [ "$(id -u)" -eq 0 ] && [ -e /sys/class/net/lo ]; then
        ip link set lo up 2>/dev/null || true
    fi
    local passed=0 failed=0 ignored=0 bins=0 bad=() t0 t1 out rc line
    t0=$(now)
    echo "== verbs suite on ${LOCO_RDMA_DEVICE:-the first active RDMA device} ($(uname -r))"
    # run_bin LABEL BIN [VAR=VALUE...]: one test binary (with ARGS), counted.
    run_bin() {
        local label=$1 bin=$2
        shift 2
        bins=$((bins + 1))
        echo "-- $label"
        out=$(mktemp)
        t1=$(now)
        set +e
        env "$@" "$bin" --color=never "${test_args[@]+"${test_args[@]}"}" 2>&1 | tee "$out"
        rc=${PIPESTATUS[0]}
        set -e
        echo "   ($label: exit $rc in $(elapsed "$t1") s)"
        line=$(grep -E '^test result:' "$out" | tail -n1 || true)
        if [ -n "$line" ]; then
            passed=$((passed + $(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<<"$line")))
            failed=$((failed + $(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")))
            ignored=$((ignored + $(sed -n 's/.* \([0-9]*\) ignored.*/\1/p' <<<"$line")))
        fi
        if [ "$rc" -ne 0 ]; then
            bad+=("$label (exit $rc)")
            [ -n "$line" ] || failed=$((failed + 1))
        fi
        rm -f "$out"
    }
    local test_args=("$@")
    while IFS= read -r bin; do
        [ -n "$bin" ] || continue
        run_bin "${bin##*/}" "$bin"
        # The multi-process tests again with rdma_cm connecting the queue pairs (peers on
        # rxe's netdev address, which needs a cluster key).
        case " ${LOCO_BOOTSTRAPS:-tcp rdma_cm} " in *" rdma_cm "*) ;; *) continue ;; esac
        case ${bin##*/} in
            verbs_distributed-*)
                run_bin "${bin##*/} (LOCO_BOOTSTRAP=rdma_cm)" "$bin" LOCO_BOOTSTRAP=rdma_cm \
                    LOCO_TEST_PEER_HOST="$(LOCO_BOOTSTRAP=rdma_cm peer_host)" \
                    LOCO_CLUSTER_KEY=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
                ;;
        esac
    done <"$list"
    # One step of the suite: runs "$@", counted as passed or failed under the name $1.
    step() {
        local name=$1
        shift
        if "$@"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
            bad+=("$name")
        fi
    }
    if [ "$example" != - ]; then
        # Once per bootstrap: queue pairs connected over the TCP rendezvous, then by rdma_cm.
        local bootstrap
        for bootstrap in ${LOCO_BOOTSTRAPS:-tcp rdma_cm}; do
            echo "== multi-process scenarios with LOCO_BOOTSTRAP=$bootstrap"
            for scenario in ${LOCO_SCENARIOS:-example_totals example_killed_peer example_kv_service \
                fault_faa_wait fault_critical_section fault_gf fault_silent fault_rejoin}; do
                LOCO_BOOTSTRAP=$bootstrap step "$scenario ($bootstrap)" "$scenario" "$example"
            done
        done
    fi
    if [ -n "${LOCO_LITMUS_BIN:-}" ] && [ "${LOCO_LITMUS_RUNS:-20}" != 0 ]; then
        step "loco litmus run --backend verbs" litmus_on_device
    fi
    if [ -n "${LOCO_LITMUS_BIN:-}" ] && [ "${LOCO_DOCTOR:-1}" != 0 ]; then
        step "loco doctor" doctor_on_device
    fi
    if [ -n "${LOCO_LITMUS_BIN:-}" ] && [ "${LOCO_VS_SIM:-1}" != 0 ]; then
        step "loco bench locks --vs-sim" sim_vs_device
    fi
    if [ -n "${LOCO_LITMUS_BIN:-}" ] && [ "${LOCO_VS_RAW:-1}" != 0 ]; then
        step "loco bench ops --vs-raw" raw_vs_loco
    fi
    case ${LOCO_NO_DEVICE_CHECK:-skipped} in
        ok) passed=$((passed + 1)); echo "-- no-device check (on the host, before the VM): ok" ;;
        failed) failed=$((failed + 1)); bad+=("no-device check (on the host)") ;;
    esac
    case ${LOCO_DOCTOR_NO_DEVICE_CHECK:-skipped} in
        ok) passed=$((passed + 1)); echo "-- loco doctor without a device (on the host, before the VM): ok" ;;
        failed) failed=$((failed + 1)); bad+=("loco doctor without a device (on the host)") ;;
    esac
    case ${LOCO_NO_LIBIBVERBS_CHECK:-skipped} in
        ok) passed=$((passed + 1)); echo "-- no-libibverbs check (on the host, before the VM): ok" ;;
        failed) failed=$((failed + 1)); bad+=("no-libibverbs check (on the host)") ;;
    esac
    echo
    echo "== verbs suite summary (${LOCO_RDMA_DEVICE:-default device}): $passed passed; $failed failed;" \
        "$ignored ignored; $bins test binaries + examples in $(elapsed "$t0") s"
    if [ "${#bad[@]}" -gt 0 ]; then
        printf '   FAILED: %s\n' "${bad[@]}"
        return 1
    fi
    echo "   ok"
}

# The simulator beside the device: `loco bench locks --backend verbs --vs-sim --profile rxe`
# measures each lock on rxe0 and sets the rxe profile's prediction beside it, the profile
# fitted to put + wait timed around each configuration (docs/simulation.md §3). Prints the
# table for the log; it checks that every row has a prediction, not how close it is (timing
# on a shared emulated VM swings too much for an assertion; `LOCO_VS_SIM=0` skips it).
sim_vs_device() {
    local t0 out rc
    t0=$(now)
    echo "-- loco bench locks --backend verbs --vs-sim --profile rxe --nodes 3 --lock nlock,wlock,slock,rcas-spinlock --threads 1,2 --secs 0.5"
    echo "   (a debug build: the lock code runs unoptimised under emulation, so the device's figures"
    echo "   are below a release build's and the errors larger; release figures: docs/simulation.md §3)"
    set +e
    out=$("$LOCO_LITMUS_BIN" bench locks --backend verbs --vs-sim --profile rxe --nodes 3 \
        --lock nlock,wlock,slock,rcas-spinlock --threads 1,2 --secs 0.5 --no-plot 2>&1)
    rc=$?
    set -e
    printf '%s\n' "$out" | sed 's/^/     /'
    if [ "$rc" -eq 0 ] && [ "$(grep -c '%  *[0-9.]*  *[0-9.]*$' <<<"$out")" -eq 8 ]; then
        echo "   loco bench locks --vs-sim: ok in $(elapsed "$t0") s"
        return 0
    fi
    echo "   loco bench locks --vs-sim: FAILED (exit $rc, or not 8 predictions) in $(elapsed "$t0") s"
    return 1
}

# loco's path beside the bare device calls: `loco bench ops --backend verbs --vs-raw` times
# put, get, rfaa and rcas + wait through loco and bare (ibv_post_send + ibv_poll_cq on the same
# queue pair), in alternating blocks. Prints the JSON rows for the log; it checks that every
# operation has its ratio, not how close the ratio is (`LOCO_VS_RAW=0` skips it; a few
# seconds). The verbs test `bare_requests_take_effect_...` checks the bare path itself.
raw_vs_loco() {
    local t0 out rc
    t0=$(now)
    echo "-- loco bench ops --backend verbs --vs-raw --op put get rfaa rcas --iters 400 --json"
    set +e
    out=$("$LOCO_LITMUS_BIN" bench ops --backend verbs --vs-raw --op put get rfaa rcas \
        --sizes 8 --outstanding 1 --iters 400 --warmup 50 --raw-block 50 --json --no-plot 2>&1)
    rc=$?
    set -e
    printf '%s\n' "$out" | sed 's/^/     /'
    if [ "$rc" -eq 0 ] && [ "$(grep -c '"vs_raw":[0-9]' <<<"$out")" -eq 4 ]; then
        echo "   loco bench ops --vs-raw: ok in $(elapsed "$t0") s"
        return 0
    fi
    echo "   loco bench ops --vs-raw: FAILED (exit $rc, or not 4 ratios) in $(elapsed "$t0") s"
    return 1
}

# The litmus runner on the device: every test of tests/litmus/ run for real on the verbs
# backend, each outcome checked against the model (exit 0 iff no forbidden outcome is seen),
# with failed CASes as rxe executes them (`--atomics rxe`: it writes the value read back,
# docs/verbs-notes.md pitfall 9), so fig6b-failed-rcas-vs-put's lost put is no false alarm.
litmus_on_device() {
    local t0 rc
    t0=$(now)
    echo "-- loco litmus run --backend verbs --atomics rxe --runs ${LOCO_LITMUS_RUNS:-20} tests/litmus/*.litmus"
    set +e
    "$LOCO_LITMUS_BIN" litmus run --backend verbs --atomics rxe --runs "${LOCO_LITMUS_RUNS:-20}" \
        "$ROOT"/tests/litmus/*.litmus 2>&1 | grep -E '^[^ ].* on verbs:|FORBIDDEN|error'
    rc=${PIPESTATUS[0]}
    set -e
    echo "   litmus on the device: $([ "$rc" -eq 0 ] && echo ok || echo FAILED) (exit $rc in $(elapsed "$t0") s)"
    [ "$rc" -eq 0 ]
}

# `loco doctor` on the device: a healthy setup passes (exit 0); a wrong LOCO_GID_INDEX, a low
# memlock limit without CAP_IPC_LOCK, and a deleted rxe link each fail (exit 1) naming the
# problem and its fix. Runs last: it deletes rxe0 and adds it back.
doctor_on_device() {
    local t0 out rc ok=0 dev=${LOCO_RDMA_DEVICE:-rxe0} netdev
    t0=$(now)
    echo "-- loco doctor on $dev"
    expect_doctor() { # NAME WANT_RC PATTERN CMD...
        local name=$1 want=$2 pat=$3
        shift 3
        set +e
        out=$("$@" 2>&1)
        rc=$?
        set -e
        if [ "$rc" -eq "$want" ] && grep -q -- "$pat" <<<"$out"; then
            echo "   doctor, $name: exit $rc, says \"$pat\": ok"
        else
            echo "   doctor, $name: exit $rc (want $want), looking for \"$pat\": FAILED"
            printf '%s\n' "$out" | sed 's/^/     /'
            ok=1
        fi
    }
    set +e
    "$LOCO_LITMUS_BIN" doctor 2>&1 | sed 's/^/     /'
    set -e
    expect_doctor healthy 0 "smoke test" "$LOCO_LITMUS_BIN" doctor
    expect_doctor "wrong GID index" 1 "LOCO_GID_INDEX=200 points at an empty entry" \
        env LOCO_GID_INDEX=200 "$LOCO_LITMUS_BIN" doctor --no-smoke
    if command -v setpriv >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        # Root without CAP_IPC_LOCK (dropped from the bounding and inheritable sets), 64 KiB.
        expect_doctor "low memlock" 1 "below the" setpriv --bounding-set=-ipc_lock \
            --inh-caps=-ipc_lock sh -c 'ulimit -l 64 && exec "$0" doctor' "$LOCO_LITMUS_BIN"
    else
        echo "   doctor, low memlock: skipped (needs root and setpriv)"
    fi
    expect_doctor "rdma_cm bootstrap" 0 "librdmacm loaded, the connection manager answers" \
        env LOCO_BOOTSTRAP=rdma_cm "$LOCO_LITMUS_BIN" doctor --no-smoke
    expect_doctor "rdma_cm with a loopback peer" 1 "runs over (here: " env LOCO_BOOTSTRAP=rdma_cm \
        LOCO_PEERS=127.0.0.1:1,127.0.0.1:2 LOCO_CLUSTER_KEY=00112233445566778899aabbccddeeff \
        "$LOCO_LITMUS_BIN" doctor --no-smoke
    netdev=$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/ndevs/1" 2>/dev/null || echo rxenet0)
    if rdma link delete "$dev" 2>/dev/null; then
        expect_doctor "no link" 1 "rdma link add rxe0 type rxe netdev" "$LOCO_LITMUS_BIN" doctor
        rdma link add "$dev" type rxe netdev "$netdev" && wait_gid "$dev" 1 10 >/dev/null \
            || { echo "   could not add $dev back"; ok=1; }
    else
        echo "   doctor, no link: skipped (rdma link delete $dev failed)"
    fi
    echo "   loco doctor: $([ "$ok" -eq 0 ] && echo ok || echo FAILED) in $(elapsed "$t0") s"
    return "$ok"
}

# A base port for the example's rendezvous, unlikely to be taken: below Linux's ephemeral range
# (32768-60999), so no process's outgoing connection can hold it before a member listens.
# await_lines COUNT SECS PATTERN FILE...: waits up to SECS seconds until the FILEs hold at
# least COUNT lines matching PATTERN (grep's basic regex); fails if they never do. Name the
# files, not a glob: a background process's output file may not exist yet when the glob is
# expanded (a missing file counts as empty).
await_lines() {
    local count=$1 secs=$2 pattern=$3 _
    shift 3
    for _ in $(seq $((secs * 10))); do
        [ "$(cat "$@" 2>/dev/null | grep -c -- "$pattern")" -ge "$count" ] && return 0
        sleep 0.1
    done
    return 1
}

# The host of the peer lists: loopback over the TCP rendezvous; under rdma_cm, which resolves
# addresses to RDMA devices, the IPv4 address of the interface rxe0 runs over (192.0.2.1 on
# vm.sh's dummy netdev).
peer_host() {
    local netdev
    if [ "${LOCO_BOOTSTRAP:-tcp}" = rdma_cm ]; then
        netdev=$(rdma link show 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p' | head -n1)
        ip -4 -o addr show dev "${netdev:-rxenet0}" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }'
    else
        echo 127.0.0.1
    fi
}

example_peers() {
    local base=$((20000 + RANDOM % 12000)) h
    h=$(peer_host)
    echo "$h:$base,$h:$((base + 1)),$h:$((base + 2))"
}

# A cluster key for the scenarios that run without one over loopback: rdma_cm's addresses
# are not loopback, so the cluster needs one.
scenario_key() {
    [ "${LOCO_BOOTSTRAP:-tcp}" = rdma_cm ] && echo "${LOCO_FAULT_KEY:?}" || echo "${LOCO_CLUSTER_KEY:-}"
}

# Three processes, each doing remote FAAs and puts on the others: every one must report OK.
example_totals() {
    local ex=$1 peers dir i rc=0
    peers=$(example_peers)
    dir=$(mktemp -d)
    echo "-- distributed_counter: 3 processes, exact totals"
    for i in 0 1 2; do
        LOCO_CLUSTER_KEY=$(scenario_key) "$ex" --node "$i" --peers "$peers" --ops 500 --timeout 60 \
            >"$dir/$i" 2>&1 &
    done
    for i in 0 1 2; do
        wait -n || rc=1
    done
    cat "$dir"/0 "$dir"/1 "$dir"/2
    for i in 0 1 2; do
        grep -q "^n$i: counter .* OK" "$dir/$i" || rc=1
    done
    rm -rf "$dir"
    echo "   example_totals: $([ "$rc" -eq 0 ] && echo ok || echo FAILED)"
    return "$rc"
}

# Three long-running processes; n2 is killed with SIGKILL once all have joined: n0 and n1 must
# exit with status 2 and "peer n2 is not responding" within 15 s.
example_killed_peer() {
    local ex=$1 peers dir i pids=() t_kill took rc=0 st
    peers=$(example_peers)
    dir=$(mktemp -d)
    echo "-- distributed_counter: 3 processes, n2 killed mid-run"
    for i in 0 1 2; do
        LOCO_CLUSTER_KEY=$(scenario_key) "$ex" --node "$i" --peers "$peers" --ops 100000000 \
            --pace-us 200 --timeout 60 >"$dir/$i" 2>&1 &
        pids+=($!)
    done
    await_lines 3 60 'joined' "$dir"/0 "$dir"/1 "$dir"/2 || true
    sleep 1
    kill -9 "${pids[2]}" 2>/dev/null || true
    t_kill=$(now)
    wait "${pids[2]}" 2>/dev/null || true
    for i in 0 1; do
        reap "${pids[$i]}" 15 "n$i (after the kill)" || rc=1
        if [ "$st" -ne 2 ] || ! grep -q 'peer n2 is not responding' "$dir/$i"; then
            echo "   n$i: exit $st, expected 2 with 'peer n2 is not responding'"
            rc=1
        fi
    done
    took=$(elapsed "$t_kill")
    cat "$dir"/0 "$dir"/1
    rm -rf "$dir"
    echo "   example_killed_peer: $([ "$rc" -eq 0 ] && echo ok || echo FAILED) (survivors done ${took} s after the kill)"
    return "$rc"
}

# examples/kv_service as 3 server processes (one per node) answering TCP clients: a load
# through all three, every read right; then n2 killed with SIGKILL and a load through n0 and n1
# on fresh keys: n2's keys refused with "owned by n2, which is dead", the others served, no read
# wrong, no other error.
example_kv_service() {
    local peers dir i pids=() rc=0 base servers
    peers=$(example_peers)
    base=$((7600 + RANDOM % 1000))
    servers=127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))
    dir=$(mktemp -d)
    echo "-- kv_service: 3 server processes, TCP load, n2 killed, load again"
    for i in 0 1 2; do
        LOCO_CLUSTER_KEY=$(scenario_key) LOCO_PEER_TIMEOUT_MS=2000 "${LOCO_KV_BIN:?}" serve \
            --node "$i" --peers "$peers" \
            --listen "127.0.0.1:$((base + i))" --timeout 20 >"$dir/$i" 2>&1 &
        pids+=($!)
    done
    await_lines 3 60 'serving' "$dir"/0 "$dir"/1 "$dir"/2 || true
    "$LOCO_KV_BIN" client --servers "$servers" --conns 6 --ops 100 >"$dir/load1" 2>&1 || rc=1
    grep -q ' 0 dead-owner errors, 0 other errors, 0 wrong reads' "$dir/load1" \
        || { echo "   the load through all three failed"; rc=1; }
    kill -9 "${pids[2]}" 2>/dev/null || true
    wait "${pids[2]}" 2>/dev/null || true
    sleep 4 # n0 and n1 find n2 dead within the 2 s peer timeout
    "$LOCO_KV_BIN" client --servers "${servers%,*}" --conns 6 --ops 100 --first-conn 100 \
        >"$dir/load2" 2>&1 || rc=1
    grep -Eq ' [1-9][0-9]* ok, [1-9][0-9]* dead-owner errors, 0 other errors, 0 wrong reads' \
        "$dir/load2" || { echo "   after the kill: not (served, refused clearly, none wrong)"; rc=1; }
    grep -q 'is owned by n2, which is dead' "$dir/load2" || rc=1
    kill "${pids[0]}" "${pids[1]}" 2>/dev/null || true
    wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
    cat "$dir"/load1 "$dir"/load2
    rm -rf "$dir"
    echo "   example_kv_service: $([ "$rc" -eq 0 ] && echo ok || echo FAILED)"
    return "$rc"
}

# ----- fault injection (examples/fault_node): 3 keyed processes, n2 the victim -------------

unix_ms() { date +%s%3N; }

# reap PID SECS LABEL: waits up to SECS seconds for PID to exit, then kills it. Sets `st` to its
# exit status; returns 1 (after saying so) if it had to be killed.
reap() {
    local pid=$1 secs=$2 label=$3
    for _ in $(seq $((secs * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    st=0
    if kill -0 "$pid" 2>/dev/null; then
        echo "   $label: still running $secs s later"
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        st=137
        return 1
    fi
    wait "$pid" || st=$?
}

# start_fault_node PEERS I AT OUT [ARGS...]: starts examples/fault_node as node I in the
# background (victim n2, stopping at AT; the fault scenarios' key and 2 s peer timeout), its
# output into OUT; `$!` is its pid.
start_fault_node() {
    local peers=$1 i=$2 at=$3 out=$4
    shift 4
    LOCO_CLUSTER_KEY=$LOCO_FAULT_KEY LOCO_PEER_TIMEOUT_MS=2000 "${LOCO_FAULT_BIN:?}" --node "$i" \
        --peers "$peers" --victim 2 --at "$at" --timeout 10 "$@" >"$out" 2>&1 &
}

# fault_run AT SIGNAL [EXTRA [AFTER [ARGS...]]]: starts n0..n2 (victim n2 stopping at AT; ARGS
# go to every process), waits for "n2: at AT", sends SIGNAL to n2 (and runs the function EXTRA
# before that, if given), then checks that n0 and n1 exit 0 with "survivor check OK" and print
# when they saw n2 dead (detection time), and that n0 found the survivors' SC history after the
# fault linearizable (--sc-history). AFTER, if given, runs in the background from the start
# with the output directory and n2's pid, and must succeed.
fault_run() {
    local at=$1 sig=$2 extra=${3:-} after=${4:-} peers dir i pids=() t_kill rc=0 st t line
    local more=("${@:5}")
    peers=$(example_peers)
    dir=$(mktemp -d)
    echo "-- fault_node: n2 at $at, kill -$sig"
    for i in 0 1 2; do
        start_fault_node "$peers" "$i" "$at" "$dir/$i" --work-ms 60000 --sc-history "$dir" \
            "${more[@]+"${more[@]}"}"
        pids+=($!)
    done
    local after_pid=
    if [ -n "$after" ]; then
        "$after" "$dir" "${pids[2]}" >"$dir/after" 2>&1 &
        after_pid=$!
    fi
    if ! await_lines 1 60 "^n2: at $at" "$dir/2"; then
        echo "   n2 never reached $at"
        rc=1
    fi
    [ -z "$extra" ] || "$extra" "$peers" "$dir" || rc=1
    t_kill=$(unix_ms)
    kill "-$sig" "${pids[2]}" 2>/dev/null || true
    for i in 0 1; do
        reap "${pids[$i]}" 60 "n$i (after the fault)" || rc=1
        if [ "$st" -ne 0 ] || ! grep -q "^n$i: survivor check OK" "$dir/$i"; then
            echo "   n$i: exit $st, expected 0 with 'survivor check OK'"
            rc=1
        fi
        line=$(grep -m1 "^n$i: peer n2 dead at " "$dir/$i" || true)
        if [ -n "$line" ]; then
            t=$(sed -n 's/^n[0-9]*: peer n2 dead at \([0-9]*\):.*/\1/p' <<<"$line")
            echo "   n$i detected n2's failure $((t - t_kill)) ms after kill -$sig"
        else
            echo "   n$i never reported n2 dead"
            rc=1
        fi
    done
    if ! grep -q "^n0: sc history of .*: linearizable" "$dir/0"; then
        echo "   n0: no linearizable SC history after the fault"
        rc=1
    fi
    if [ -n "$after" ]; then
        wait "$after_pid" || rc=1
        cat "$dir/after"
        for i in 0 1; do
            grep -q "^n$i: fenced: " "$dir/$i" || { echo "   n$i: no 'fenced:' line"; rc=1; }
        done
    fi
    kill -9 "${pids[2]}" 2>/dev/null || true
    wait "${pids[2]}" 2>/dev/null || true
    cat "$dir"/0 "$dir"/1 "$dir"/2 | grep -v '^ *$' | sed 's/^/   | /'
    rm -rf "$dir"
    echo "   fault $at/$sig: $([ "$rc" -eq 0 ] && echo ok || echo FAILED)"
    return "$rc"
}

# During a run: a stranger (the wrong key) tries to join as n1 from a port of its own, a
# fuzzing client sends up to 3000 malformed frames to n0's rendezvous port (bounded: 10 s),
# and a holder of the key says Hello as n1 and leaves before its Join, five times. The stranger
# must be refused; the members must not notice (checked by fault_run).
strangers() {
    local peers=$1 dir=$2 own st=0
    own=$(sed 's/,.*//' <<<"$peers"),$(peer_host):$((10000 + RANDOM % 10000)),$(sed 's/.*,//' <<<"$peers")
    LOCO_CLUSTER_KEY=$(tr 0-9a-f f-fa-e <<<"$LOCO_FAULT_KEY") "$LOCO_FAULT_BIN" --node 1 --peers "$own" \
        --victim 2 --at faa-wait --timeout 10 >"$dir/stranger" 2>&1 || st=$?
    if [ "$st" -ne 2 ] || ! grep -q 'authentication' "$dir/stranger"; then
        echo "   stranger: exit $st, expected 2 with an authentication failure:"
        sed 's/^/   | /' "$dir/stranger"
        return 1
    fi
    echo "   stranger with the wrong key refused: $(grep -o 'failed authentication.\{0,60\}' "$dir/stranger" | head -n1)"
    "$LOCO_FAULT_BIN" --node 1 --peers "$peers" --victim 2 --at faa-wait --fuzz "$(sed 's/,.*//' <<<"$peers")" \
        | sed 's/^/   /'
    # A holder of the key proves it to n0 as n1 and leaves before joining, five times: n0 must
    # not take the real n1 for dead (the survivors' FAAs towards n1 would then fail).
    if ! LOCO_CLUSTER_KEY=$LOCO_FAULT_KEY "$LOCO_FAULT_BIN" --node 1 --peers "$peers" --victim 2 \
        --at faa-wait --timeout 10 --hello-and-leave "$(sed 's/,.*//' <<<"$peers")" >"$dir/hello" 2>&1; then
        echo "   hello-and-leave failed:"
        sed 's/^/   | /' "$dir/hello"
        return 1
    fi
    echo "   $(tail -n1 "$dir/hello")"
    # Under rdma_cm, n0's connection manager listener gets requests it must refuse: no private
    # data, random bytes, a wrong key, an incarnation that never joined, incarnation 0 (its
    # members must not notice either).
    if [ "${LOCO_BOOTSTRAP:-tcp}" = rdma_cm ]; then
        if ! LOCO_CLUSTER_KEY=$LOCO_FAULT_KEY "$LOCO_FAULT_BIN" --node 1 --peers "$peers" --victim 2 \
            --at faa-wait --timeout 10 --cm-stranger "$(sed 's/,.*//' <<<"$peers")" >"$dir/cm" 2>&1 \
            || [ "$(grep -c '^cm-stranger refused' "$dir/cm")" -ne 5 ]; then
            echo "   rdma_cm stranger: not every request refused:"
            sed 's/^/   | /' "$dir/cm"
            return 1
        fi
        sed 's/^/   /' "$dir/cm"
    fi
}

fault_faa_wait() { fault_run faa-wait KILL strangers; }
fault_critical_section() { fault_run critical-section KILL; }
fault_gf() { fault_run gf KILL; }
# A partition without FIN: n2 stops (SIGSTOP) and only the heartbeats can tell. Once the
# survivors have checked their counts they linger, n2 is resumed (SIGCONT) and tries FAAs
# towards them: they must fail (fenced out), and the survivors' counter words stay unchanged.
fault_silent() { fault_run faa-wait STOP "" resume_after_check --linger-ms 6000; }

# resume_after_check PIDS... DIR: waits until both survivors linger, then SIGCONTs n2 and
# checks that its FAAs failed (called by fault_run after the survivors' checks).
resume_after_check() {
    local dir=$1 pid=$2 line
    await_lines 2 60 'lingering' "$dir"/0 "$dir"/1 || true
    kill -CONT "$pid" 2>/dev/null || true
    await_lines 2 30 'resumed after a stop' "$dir/2" || true
    if [ "$(grep -c 'resumed after a stop: towards' "$dir/2")" -lt 2 ] || grep -q LANDED "$dir/2"; then
        echo "   n2 resumed and was not fenced out (or never tried):"
        return 1
    fi
    echo "   n2 resumed after SIGCONT: its FAAs towards the survivors failed (fenced out)"
}

# kill -9 of n2 inside an NLock critical section on n0; once both survivors have recovered the
# lock (skipping the dead holder) and checked their FAAs, n2 is started again under the same
# node id: it rejoins as a new incarnation (fresh memory and queue pairs; the survivors dial it
# back), the survivors' old context reports the restart (PeerDead), and all three do
# lock-protected increments of a counter on n0 in new contexts: n0 checks that none was lost.
fault_rejoin() {
    local peers dir i pids=() rc=0 st t_kill t_start t line
    peers=$(example_peers)
    dir=$(mktemp -d)
    echo "-- fault_node: n2 killed in a critical section, then started again (rejoin)"
    for i in 0 1 2; do
        start_fault_node "$peers" "$i" rejoin "$dir/$i" --work-ms 60000
        pids+=($!)
    done
    await_lines 1 60 "^n2: at rejoin" "$dir/2" || { echo "   n2 never reached rejoin"; rc=1; }
    t_kill=$(unix_ms)
    kill -9 "${pids[2]}" 2>/dev/null || true
    wait "${pids[2]}" 2>/dev/null || true
    await_lines 2 60 'waiting for rejoin' "$dir"/0 "$dir"/1 || true
    t_start=$(unix_ms)
    echo "   survivors recovered and waiting $((t_start - t_kill)) ms after kill -9; starting n2 again"
    start_fault_node "$peers" 2 rejoin "$dir/2b" --restarted
    pids[2]=$!
    for i in 0 1 2; do
        reap "${pids[$i]}" 60 "n$i (after the restart)" || rc=1
        [ "$st" -eq 0 ] || { echo "   n$i: exit $st, expected 0"; rc=1; }
    done
    for i in 0 1; do
        grep -q "^n$i: survivor check OK" "$dir/$i" || { echo "   n$i: no 'survivor check OK'"; rc=1; }
        grep -q "^n$i: lock: acquired " "$dir/$i" || { echo "   n$i: did not get the lock"; rc=1; }
        grep -q "^n$i: old context towards n2: .*restarted" "$dir/$i" \
            || { echo "   n$i: its old context did not report the restart"; rc=1; }
        grep -q "^n$i: rejoin done" "$dir/$i" || { echo "   n$i: no 'rejoin done'"; rc=1; }
        line=$(grep -m1 "^n$i: n2 rejoined as incarnation" "$dir/$i" || true)
        [ -n "$line" ] || { echo "   n$i never saw n2 rejoin"; rc=1; }
    done
    # The first survivor to take the lock skipped the dead holder's ticket and was told.
    cat "$dir"/0 "$dir"/1 | grep -q "lock: acquired .*poisoned: true" \
        || { echo "   no survivor was told of the dead holder (poisoned)"; rc=1; }
    grep -q "^n2: rejoined as incarnation" "$dir/2b" || { echo "   n2 did not rejoin"; rc=1; }
    grep -q "^n2: rejoin done" "$dir/2b" || { echo "   n2 (restarted): no 'rejoin done'"; rc=1; }
    grep -q "^n0: rejoin check OK" "$dir/0" || { echo "   n0: no 'rejoin check OK'"; rc=1; }
    cat "$dir"/0 "$dir"/1 "$dir"/2 "$dir"/2b | grep -v '^ *$' | sed 's/^/   | /'
    rm -rf "$dir"
    echo "   fault rejoin: $([ "$rc" -eq 0 ] && echo ok || echo FAILED)"
    return "$rc"
}

if [ "${1:-}" = --inside ]; then
    shift
    run_inside "$@"
    exit $?
fi

# ----- outside: build, pick native or VM, run ---------------------------------------------

mode=auto
example=1
test_args=()
while [ $# -gt 0 ]; do
    case $1 in
        --native) mode=native ;;
        --vm) mode=vm ;;
        --no-example) example=0 ;;
        -h | --help) usage 0 ;;
        --) shift; test_args=("$@"); break ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done

need_cmd cargo "rustup (https://rustup.rs)"
need_cmd cmake cmake
if ! compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null && ! compgen -G '/usr/lib/*/libclang*.so*' >/dev/null; then
    die "libclang not found (the verbs build runs bindgen); run soft-roce-ci/install-deps.sh --build"
fi

t_build=$(now)
mkdir -p "$STATE_DIR"
list=$STATE_DIR/tests.list
# The backend-generic test targets run on the device besides the verbs-only `verbs*` ones.
DEFAULT_TESTS='^(litmus|contention|ordering|sv|fig8|counter|locks|linearizability|ported|smoke|bad_input|aio)$'
filter='^verbs'
tests=${LOCO_VERBS_TESTS-$DEFAULT_TESTS}
[ -z "$tests" ] || filter="$filter|$tests"
pkgs=()
for p in ${LOCO_VERBS_PACKAGES:-loco-rdmawait loco-rdmawaitrmw loco-sv loco-locks loco-sc}; do
    pkgs+=(-p "$p")
done
# With tokio: the async tests (`aio`) run on the device too, sleeping on completion channels.
features=loco-rdmawait/verbs,loco-rdmawait/tokio
case " ${pkgs[*]} " in *" loco-locks "*) features=$features,loco-locks/tokio ;; esac
log "building the verbs test suite (cargo test ${pkgs[*]} --features $features --tests --no-run)"
(cd "$ROOT" && cargo test "${pkgs[@]}" --features "$features" --tests --no-run \
    --message-format=json-render-diagnostics) >"$STATE_DIR/build.json" \
    || die "the verbs build failed (see the messages above)"
# One JSON object per line; keep the executables of integration-test targets matching $filter.
grep '"reason":"compiler-artifact"' "$STATE_DIR/build.json" \
    | grep '"kind":\["test"\]' \
    | grep '"executable":"' \
    | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p' \
    | awk -v re="$filter" '$1 ~ re { print $2 }' | sort -u >"$list"
[ -s "$list" ] || die "no test binary matched /$filter/ (see $STATE_DIR/build.json)"
ex_bin=-
if [ "$example" -eq 1 ]; then
    # cluster_checks and aio_bench are for cluster-suite.sh (run after this script by
    # run-tests.sh); aio_bench needs tokio.
    (cd "$ROOT" && cargo build -p loco --features verbs,tokio --example distributed_counter \
        --example fault_node --example cluster_checks --example aio_bench --example kv_service \
        --message-format=json-render-diagnostics) \
        >"$STATE_DIR/example.json" \
        || die "building examples/distributed_counter and fault_node failed"
    ex_bin=$(grep '"executable":"[^"]*distributed_counter"' "$STATE_DIR/example.json" \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
    [ -x "$ex_bin" ] || die "no distributed_counter executable in $STATE_DIR/example.json"
    LOCO_FAULT_BIN=$(grep '"executable":"[^"]*fault_node"' "$STATE_DIR/example.json" \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
    [ -x "$LOCO_FAULT_BIN" ] || die "no fault_node executable in $STATE_DIR/example.json"
    # A fresh cluster key for the fault runs (what `loco keygen` prints).
    LOCO_FAULT_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    LOCO_KV_BIN=$(grep '"executable":"[^"]*kv_service"' "$STATE_DIR/example.json" \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
    [ -x "$LOCO_KV_BIN" ] || die "no kv_service executable in $STATE_DIR/example.json"
    export LOCO_FAULT_BIN LOCO_FAULT_KEY LOCO_KV_BIN
fi
(cd "$ROOT" && cargo build -p loco-cli --features verbs --message-format=json-render-diagnostics) \
    >"$STATE_DIR/cli.json" || die "building the loco command with verbs failed"
LOCO_LITMUS_BIN=$(grep '"executable":"[^"]*/loco"' "$STATE_DIR/cli.json" \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$LOCO_LITMUS_BIN" ] || die "no loco executable in $STATE_DIR/cli.json"
export LOCO_LITMUS_BIN
log "built $(wc -l <"$list") test binaries in $(elapsed "$t_build") s: $(xargs -n1 basename <"$list" | tr '\n' ' ')"

# A usable device on this host? (an active port on any RDMA device)
has_device() {
    local p
    for p in /sys/class/infiniband/*/ports/*/state; do
        [ -e "$p" ] || continue
        grep -q ACTIVE "$p" && return 0
    done
    return 1
}

# Create rxe0 natively where the kernel can (rdma_rxe module), as root: setup-host.sh.
native_rxe() {
    [ "$(id -u)" -eq 0 ] || return 1
    modprobe rdma_rxe 2>/dev/null || return 1
    log "creating a Soft-RoCE device natively (soft-roce-ci/setup-host.sh)"
    "$SRC_DIR/setup-host.sh" >&2 || return 1
    export LOCO_RDMA_DEVICE=${LOCO_RDMA_DEVICE:-rxe0} LOCO_GID_INDEX=${LOCO_GID_INDEX:-1}
}

if [ "$mode" = auto ]; then
    if has_device || native_rxe; then mode=native; else mode=vm; fi
elif [ "$mode" = native ] && ! has_device; then
    native_rxe || die "no active RDMA device and rdma_rxe cannot be loaded here; use --vm"
fi

if [ "$mode" = native ]; then
    log "running natively on: $(cd /sys/class/infiniband && echo *)"
    exec "$0" --inside "$list" "$ex_bin" -- "${test_args[@]+"${test_args[@]}"}"
fi
# This host has no device: the suite must fail here, clearly, rather than pass silently.
export LOCO_NO_DEVICE_CHECK=failed
smoke=$(grep '/verbs-[0-9a-f]*$' "$list" | head -n1 || true)
if [ -n "$smoke" ]; then
    set +e
    out=$(env -u LOCO_RDMA_DEVICE -u LOCO_GID_INDEX "$smoke" --exact smoke --color=never 2>&1)
    rc=$?
    set -e
    if [ "$rc" -ne 0 ] && grep -q 'rdma link add' <<<"$out"; then
        LOCO_NO_DEVICE_CHECK=ok
        log "without a device the suite fails with the backend's explanation: ok"
    else
        log "without a device, ${smoke##*/} --exact smoke exited $rc without the expected explanation:"
        printf '%s\n' "$out" | tail -n 20 >&2
    fi
    # `loco doctor` here, without a device: exit 1, and a failed check that says what to do.
    export LOCO_DOCTOR_NO_DEVICE_CHECK=failed
    set +e
    out=$(env -u LOCO_RDMA_DEVICE -u LOCO_GID_INDEX "$LOCO_LITMUS_BIN" doctor 2>&1)
    rc=$?
    set -e
    if [ "$rc" -eq 1 ] && grep -q '^fail' <<<"$out" && grep -q 'fix: ' <<<"$out"; then
        LOCO_DOCTOR_NO_DEVICE_CHECK=ok
        log "without a device, loco doctor fails with advice: ok"
    fi
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    # And without libibverbs at all (masked in a private mount namespace; needs root).
    lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1 2>/dev/null || true)
    export LOCO_NO_LIBIBVERBS_CHECK=skipped
    if [ "$(id -u)" -eq 0 ] && [ -f "$lib" ] && command -v unshare >/dev/null 2>&1; then
        set +e
        # shellcheck disable=SC2016 # $1 and $@ belong to the inner shell
        out=$(unshare -m sh -c 'mount --bind /dev/null "$1" && shift && exec "$@"' sh "$lib" \
            "$smoke" --exact smoke --color=never 2>&1)
        rc=$?
        set -e
        if [ "$rc" -ne 0 ] && grep -q 'libibverbs.so.1 could not be loaded' <<<"$out"; then
            LOCO_NO_LIBIBVERBS_CHECK=ok
            log "without libibverbs the suite fails saying what to install: ok"
        else
            LOCO_NO_LIBIBVERBS_CHECK=failed
            log "without libibverbs, smoke exited $rc without the expected explanation:"
            printf '%s\n' "$out" | tail -n 20 >&2
        fi
    fi
else
    LOCO_NO_DEVICE_CHECK=skipped
fi
log "this kernel has no RDMA device: running in the VM (soft-roce-ci/vm.sh)"
exec "$SRC_DIR/vm.sh" --workdir "$ROOT" --timeout "${LOCO_VM_TIMEOUT:-1200}" -- \
    "$SRC_DIR/run.sh" --inside "$list" "$ex_bin" -- "${test_args[@]+"${test_args[@]}"}"
