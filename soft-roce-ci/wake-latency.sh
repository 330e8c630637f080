#!/usr/bin/env bash
# Measures a futex wake-up on this project's VM beside loco's put and rfaa round trips, so
# that the simulator's `rxe` profile can be checked in the same units (docs/simulation.md §3,
# "Parking"): the profile's `wake` and `unpark` are in µs of its unscaled put (94 µs).
#
# Usage: soft-roce-ci/wake-latency.sh [--loco PATH] [--rounds N]
#   --loco PATH   the loco binary (default: target/release/loco, built with --features verbs)
#   --rounds N    repeats of the whole measurement (default 3)
#
# Builds soft-roce-ci/wake-latency.c with the host's C compiler (static, so that the VM needs
# nothing), then boots the VM (soft-roce-ci/vm.sh) and runs, per round, the wake-up with 0, 1
# and 2 spinning threads and `loco bench ops --op put rfaa` on rxe0. Not run by CI.
set -euo pipefail
. "${BASH_SOURCE[0]%/*}/lib.sh"
ROOT_DIR=$(cd "$SRC_DIR/.." && pwd)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

loco=$ROOT_DIR/target/release/loco rounds=3
while [ $# -gt 0 ]; do
    case $1 in
        --loco) loco=$(realpath "$2"); shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) usage ;;
        *) log "unknown option: $1"; usage 2 >&2 ;;
    esac
done
case $rounds in ''|*[!0-9]*|0) die "--rounds takes a positive number, not '$rounds'" ;; esac
[ -x "$loco" ] || die "no loco binary at $loco (cargo build --release -p loco-cli --features verbs)"
need_cmd cc build-essential
out=$ROOT_DIR/target/wake-latency
mkdir -p "$out"
cc -O2 -static -pthread -o "$out/wake-latency" "$SRC_DIR/wake-latency.c"
cat > "$out/run.sh" <<SCRIPT
#!/bin/sh
for r in \$(seq $rounds); do
    for s in 0 1 2; do "$out/wake-latency" \$s; done
    "$loco" bench ops --backend verbs --op put rfaa --sizes 8 --iters 1000 --no-plot 2>&1 | grep -E '^(put|rfaa) '
done
SCRIPT
chmod +x "$out/run.sh"
"$SRC_DIR/vm.sh" --workdir "$ROOT_DIR" -- "$out/run.sh"
