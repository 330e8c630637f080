# Sourced by run-demo.sh and run-tests.sh: puts a Rust toolchain on PATH, installing it with
# rustup (minimal profile, plus clippy and rustfmt) when cargo is missing, and what a fresh
# Debian or Ubuntu machine lacks for that: curl (to fetch rustup) and a C compiler (rustc links
# every program with `cc`; without it the first build fails with "linker `cc` not found").
# Those come from apt-get, as root or through sudo; without either, it says what to install.
ensure_rust_pkgs=()
command -v cc >/dev/null 2>&1 || ensure_rust_pkgs+=(gcc libc6-dev)
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ] &&
    ! command -v curl >/dev/null 2>&1; then
    ensure_rust_pkgs+=(curl ca-certificates)
fi
if [ "${#ensure_rust_pkgs[@]}" -gt 0 ]; then
    if [ "$EUID" -eq 0 ]; then
        ensure_rust_root=()
    elif command -v sudo >/dev/null 2>&1; then
        ensure_rust_root=(sudo)
    else
        ensure_rust_root=(missing)
    fi
    if ! command -v apt-get >/dev/null 2>&1 || [ "${ensure_rust_root[0]:-}" = missing ]; then
        echo "building loco-rs needs ${ensure_rust_pkgs[*]} (a C compiler for rustc's linker," \
            "curl for rustup), installed here with apt-get as root or through sudo, which" \
            "this machine lacks: install them as root (apt-get install ${ensure_rust_pkgs[*]}," \
            "or your system's packages for them), then run this again" >&2
        exit 1
    fi
    echo "==> installing ${ensure_rust_pkgs[*]} (apt-get; a Rust build needs them)"
    # --no-install-recommends: gcc only recommends libc6-dev, listed above for that reason.
    if ! { "${ensure_rust_root[@]}" apt-get update -qq &&
        "${ensure_rust_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${ensure_rust_pkgs[@]}"; }; then
        echo "apt-get could not install ${ensure_rust_pkgs[*]}: install them, then run this again" >&2
        exit 1
    fi
fi
if ! command -v cargo >/dev/null 2>&1; then
    if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
        echo "==> installing a Rust toolchain (rustup)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            sh -s -- -y --profile minimal -c clippy,rustfmt
    fi
    export PATH="$HOME/.cargo/bin:$PATH"
fi
