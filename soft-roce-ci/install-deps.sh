#!/usr/bin/env bash
# Install the Debian/Ubuntu packages the Soft-RoCE scripts and the verbs build need.
#
# Idempotent: packages already installed are skipped, and apt is not touched at all when
# nothing is missing. Runs `apt-get update` only when the package lists are missing or lack
# a wanted package. Installs with --no-install-recommends. Needs root (or sudo).
#
# Usage: install-deps.sh [--vm | --host | --build]...   (default: all three groups)
#   --vm     what vm.sh needs to boot Debian's kernel with rdma_rxe under qemu
#   --host   what setup-host.sh and the perftest comparison need (verbs runtime + tools)
#   --build  what building loco-rs with the `verbs` feature needs (bindgen's libclang, cmake)
#
# Deliberately NOT installed: rdma-core (it pulls in udev and upgrades systemd; the `rdma`
# tool comes from iproute2) and libibverbs-dev (rdma-mummy-sys carries its own headers).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

want_vm=0 want_host=0 want_build=0
while [ $# -gt 0 ]; do
    case $1 in
        --vm) want_vm=1 ;;
        --host) want_host=1 ;;
        --build) want_build=1 ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
if [ $((want_vm + want_host + want_build)) -eq 0 ]; then
    want_vm=1 want_host=1 want_build=1
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script is for Debian/Ubuntu hosts"

# Verbs user space: libibverbs + the rxe provider, perftest, the `rdma` tool (iproute2).
host_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils perftest iproute2 kmod)
# VM path. qemu-system-x86 depends on qemu-system-data (qboot.rom, used for the fast PVH boot)
# and seabios (the fallback firmware); listed explicitly so a minimal install cannot miss them.
# The guest runs the host's binaries (virtfs + chroot), so it needs the host packages too.
# python3 runs the Ethernet hub of the multi-VM cluster (cluster.sh, hub.py).
vm_pkgs=(qemu-system-x86 qemu-system-data seabios xz-utils kmod busybox-static python3 "${host_pkgs[@]}")

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]
}
has_candidate() {
    local c
    c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
    [ -n "$c" ] && [ "$c" != "(none)" ]
}
lists_present() {
    compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null
}
updated=0
apt_update() {
    [ "$updated" -eq 0 ] || return 0
    log "running apt-get update"
    as_root apt-get update -qq >/dev/null || die "apt-get update failed"
    updated=1
}
lists_present || apt_update

# libclang for bindgen: the release's default LLVM (14 on Debian 12); libclang-common-N-dev
# provides stddef.h, without which bindgen fails with "'stddef.h' file not found".
build_pkgs=(cmake)
if [ "$want_build" -eq 1 ]; then
    llvm=$(apt-cache depends libclang-dev 2>/dev/null | sed -n 's/.*Depends: libclang-\([0-9][0-9]*\)-dev$/\1/p' | head -n1)
    if [ -z "$llvm" ] && [ "$updated" -eq 0 ]; then
        apt_update
        llvm=$(apt-cache depends libclang-dev 2>/dev/null | sed -n 's/.*Depends: libclang-\([0-9][0-9]*\)-dev$/\1/p' | head -n1)
    fi
    llvm=${llvm:-14}
    build_pkgs+=("libclang1-$llvm" "libclang-common-$llvm-dev")
fi

pkgs=()
[ "$want_host" -eq 0 ] || pkgs+=("${host_pkgs[@]}")
[ "$want_vm" -eq 0 ] || pkgs+=("${vm_pkgs[@]}")
[ "$want_build" -eq 0 ] || pkgs+=("${build_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
    is_installed "$p" && continue
    case " ${missing[*]} " in *" $p "*) continue ;; esac
    missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    log "all ${#pkgs[@]} packages already installed"
    exit 0
fi

for p in "${missing[@]}"; do
    has_candidate "$p" && continue
    apt_update
    has_candidate "$p" || die "package '$p' is not available from apt on this system"
done

log "installing: ${missing[*]}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Use-Pty=0 "${missing[@]}" >"$out" 2>&1; then
    cat "$out" >&2
    die "apt-get install failed"
fi
log "installed ${#missing[@]} packages"
