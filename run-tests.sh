#!/usr/bin/env bash
# Runs every test of loco-rs: the default suite on the soft NIC, lints, and (unless --soft-only)
# the verbs suite on a real Soft-RoCE (rdma_rxe) device, natively or in a qemu VM.
#
# Usage: ./run-tests.sh [--soft-only]
#
# On a fresh Debian/Ubuntu machine it installs what it needs first: a Rust toolchain (rustup)
# if cargo is missing, and the Debian packages of soft-roce-ci/install-deps.sh for the verbs part
# (cmake, libclang, qemu, a Debian kernel for rxe, perftest). Needs root or sudo for apt.
# The verbs part ends with soft-roce-ci/cluster-suite.sh: the cases that need separate hosts,
# on three VMs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

soft_only=0
for a in "$@"; do
    case $a in
        --soft-only) soft_only=1 ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) echo "unknown argument: $a" >&2; exit 2 ;;
    esac
done

step() { printf '\n==> %s\n' "$*"; }

# shellcheck source=scripts/ensure-rust.sh
. scripts/ensure-rust.sh

step "format and lints"
cargo fmt --all -- --check
# `-D warnings` makes every warn-level lint an error, `missing_docs` included (it is `warn` in the
# workspace Cargo.toml so that editors show it while one writes): an undocumented public item of
# any crate fails CI here.
cargo clippy --workspace --all-targets --quiet -- -D warnings
# API docs build without warnings (broken intra-doc links, unclosed HTML, bad code blocks, ...).
# About 35 s on the loaded 2-core CI machine (9 s of CPU) once clippy has checked the dependencies,
# whose metadata the doc pass reuses; 3 min from a cold target directory.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# Every citation of docs/ names a section, rule or pitfall that exists there.
scripts/check-doc-citations.sh

step "default test suite (soft NIC)"
cargo test --workspace --quiet

# About 40 s (a build with the feature, then ~2 s of tests): feature `tokio` is off by default.
step "async tasks (feature tokio): aio suites, their doc examples, the tokio_tasks and kv_service examples, tests/examples.rs"
cargo test -p loco-rdmawait -p loco-locks --features loco-rdmawait/tokio,loco-locks/tokio --test aio --quiet
cargo test -p loco-rdmawait --features tokio --doc --quiet aio
cargo run --quiet --features tokio --example tokio_tasks -- --threads 2 --tasks 200
cargo run --quiet --features tokio --example kv_service -- demo
# What the tokio examples print at edge arguments (tests/examples.rs runs them with cargo run).
cargo test -p loco --features tokio --test examples --quiet

step "explorer: reduced vs unreduced on every shipped litmus test (release)"
cargo test --release -p loco-litmus --test reduction_crosscheck --test rxe_atomics -- --nocapture

if [ "$soft_only" = 0 ]; then
    step "Debian packages for the verbs build and Soft-RoCE"
    soft-roce-ci/install-deps.sh
    step "lints with the verbs feature"
    # With tokio too: the completion-channel code exists only with both features.
    cargo clippy --workspace --features loco/verbs,loco/tokio,loco-litmus/verbs,loco-cli/verbs --all-targets --quiet -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --features loco/verbs,loco/tokio,loco-litmus/verbs --quiet
    # The verbs backend's device-free unit tests (rendezvous gate, authentication, wire format,
    # timeouts): they need no RDMA device, so they run here, in about a second once built.
    step "verbs unit tests that need no device (rendezvous, authentication)"
    cargo test -p loco-rdmawait --features verbs --lib --quiet
    # About 20 s: the CLI as built with verbs, on a host without a device (doctor's advice,
    # the benchmarks' refusals and simulated runs).
    step "loco CLI tests with the verbs feature, no device"
    cargo test -p loco-cli --features verbs --quiet
    step "verbs test suite on Soft-RoCE (rdma_rxe)"
    soft-roce-ci/run.sh
    # About 3 min: seven cases on 3 VMs (async on 2) joined by an in-host Ethernet segment
    # (cluster.sh), each with the TCP bootstrap and with rdma_cm, with the examples run.sh built.
    step "multi-host cases on a 3-VM Soft-RoCE cluster (packets between kernels, locks/sv/SC, killed host, partition, dropped packets, netem)"
    soft-roce-ci/cluster-suite.sh
fi
step "all tests passed"
