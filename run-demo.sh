#!/usr/bin/env bash
# Runs the main demo on the soft NIC: examples/quickstart (3 nodes; puts, gets, remote FAA
# counters). Installs a Rust toolchain first if cargo is missing (and curl and a C compiler, with
# apt-get, if the machine lacks them: scripts/ensure-rust.sh). Arguments go to the demo
# (e.g. `./run-demo.sh --schedule chaos --seed 7`; `--help` lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=scripts/ensure-rust.sh
. scripts/ensure-rust.sh
exec cargo run --quiet --release --example quickstart -- "$@"
