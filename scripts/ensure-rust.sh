# Sourced by run-demo.sh and run-tests.sh: puts a Rust toolchain on PATH, installing it with
# rustup (minimal profile, plus clippy and rustfmt) when cargo is missing.
if ! command -v cargo >/dev/null 2>&1; then
    if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
        echo "==> installing a Rust toolchain (rustup)"
        command -v curl >/dev/null 2>&1 || {
            echo "curl is needed to install Rust: apt-get install curl ca-certificates" >&2
            exit 1
        }
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            sh -s -- -y --profile minimal -c clippy,rustfmt
    fi
    export PATH="$HOME/.cargo/bin:$PATH"
fi
