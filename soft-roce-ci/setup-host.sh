#!/usr/bin/env bash
# Create a Soft-RoCE device (rxe) on THIS machine, for Linux hosts whose kernel has rdma_rxe
# (most distribution kernels). Machines without it (containers, microVM kernels such as
# Firecracker's) should use soft-roce-ci/vm.sh instead; this script says so when it applies.
#
# Usage: setup-host.sh [--device DEV] [--netdev IFACE] [--ip CIDR] [--remove]
#   --device DEV    rxe device name (default rxe0)
#   --netdev IFACE  attach to this existing interface, which needs an IPv4 address for GID
#                   index 1 (default: create the dummy interface rxenet0, MTU 9000, traffic
#                   never leaves the machine)
#   --ip CIDR       address for the dummy interface (default 192.0.2.1/24, TEST-NET-1)
#   --remove        delete DEV (and the dummy interface if this script would create it)
#
# Needs root, kmod, iproute2 (`ip`, `rdma`) and, for the summary and for user space, the
# packages from `install-deps.sh --host`. Idempotent: an existing device is kept.
# Afterwards: export LOCO_RDMA_DEVICE=rxe0 LOCO_GID_INDEX=1
set -euo pipefail
# shellcheck source=lib.sh
. "${BASH_SOURCE[0]%/*}/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

dev=rxe0 netdev='' cidr=192.0.2.1/24 remove=0
while [ $# -gt 0 ]; do
    case $1 in
        --device) dev=$2; shift ;;
        --netdev) netdev=$2; shift ;;
        --ip) cidr=$2; shift ;;
        --remove) remove=1 ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 >&2 ;;
    esac
    shift
done
dummy=0
if [ -z "$netdev" ]; then
    netdev=rxenet0 dummy=1
fi

[ "$(id -u)" -eq 0 ] || die "needs root (try: sudo $0 $*)"
need_cmd ip iproute2
need_cmd rdma iproute2

if [ "$remove" -eq 1 ]; then
    if [ -e "/sys/class/infiniband/$dev" ]; then
        rdma link delete "$dev" && log "deleted $dev"
    fi
    if [ "$dummy" -eq 1 ] && [ -e "/sys/class/net/$netdev" ]; then
        ip link delete "$netdev" && log "deleted $netdev"
    fi
    exit 0
fi

# Explain why this kernel cannot load rdma_rxe, as precisely as we can tell.
no_rxe() {
    local kver config reason
    kver=$(uname -r)
    config=
    for f in "/boot/config-$kver" /proc/config.gz; do
        [ -e "$f" ] && config=$f && break
    done
    if [ -n "$config" ] && ! { zcat -f "$config" 2>/dev/null || true; } | grep -q '^CONFIG_RDMA_RXE=[ym]'; then
        reason="the kernel was built without it (CONFIG_RDMA_RXE is not set in $config)"
        if ! { zcat -f "$config" 2>/dev/null || true; } | grep -q '^CONFIG_INFINIBAND=[ym]'; then
            reason="the kernel was built without RDMA support at all (no CONFIG_INFINIBAND in $config)"
        fi
    elif [ "$(cat /proc/sys/kernel/modules_disabled 2>/dev/null || echo 0)" = 1 ]; then
        reason="module loading is disabled (kernel.modules_disabled=1)"
    elif [ ! -d "/lib/modules/$kver" ]; then
        reason="there are no modules for the running kernel $kver (a container, or a kernel without modules)"
    else
        reason="modprobe rdma_rxe failed: $1"
    fi
    cat >&2 <<EOF
${0##*/}: this machine's kernel ($kver) cannot provide Soft-RoCE:
    $reason.
Use the VM path instead, which boots Debian's kernel with rdma_rxe under qemu (no root, no
kernel change needed; TCG if there is no usable KVM):
    soft-roce-ci/install-deps.sh        # once, as root
    soft-roce-ci/vm.sh -- ibv_devinfo -d rxe0
EOF
    exit 3
}

if [ ! -d /sys/module/rdma_rxe ]; then
    need_cmd modprobe kmod
    # rdma_rxe needs a crc32 shash; preloading avoids "failed to init crc32 algorithm err:-2"
    # where the automatic request_module cannot work. Failures here are harmless.
    modprobe -q crc32_generic 2>/dev/null || true
    modprobe -q crc32_pclmul 2>/dev/null || true
    if ! err=$(modprobe rdma_rxe 2>&1); then
        no_rxe "$err"
    fi
fi
# User space needs ib_uverbs (/dev/infiniband/uverbsN); rdma_ucm serves rdma_cm (perftest -R).
for m in ib_uverbs rdma_ucm; do
    [ -d "/sys/module/$m" ] || modprobe -q "$m" 2>/dev/null || log "could not load $m (continuing)"
done

if [ -e "/sys/class/infiniband/$dev" ]; then
    log "$dev exists already; keeping it"
    on=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
    [ -z "$on" ] || netdev=$on
    cidr=
elif [ "$dummy" -eq 0 ]; then
    [ -e "/sys/class/net/$netdev" ] || die "no such network interface: $netdev"
    cidr=
fi
if ! rxe_add "$dev" "$netdev" "$cidr"; then
    dmesg 2>/dev/null | grep -iE 'rxe|crc32' | tail -n 5 >&2 || true
    die "could not set up $dev on $netdev"
fi

gid=$(wait_gid "$dev" 1 1)
echo "rxe device $dev on $netdev is ready; GID index 1 = $gid"
if command -v ibv_devinfo >/dev/null 2>&1; then
    ibv_devinfo -d "$dev" | grep -E 'hca_id|transport|state|active_mtu|link_layer' || true
else
    log "ibv_devinfo not found (run install-deps.sh --host)"
fi
if ! compgen -G '/usr/lib/*/libibverbs/librxe-rdmav*.so' >/dev/null \
    && ! compgen -G '/usr/lib*/libibverbs/librxe-rdmav*.so' >/dev/null; then
    log "no rxe provider for libibverbs found (package ibverbs-providers); user space will not see $dev"
fi
for f in /dev/infiniband/uverbs*; do
    [ -e "$f" ] || continue
    if [ "$(stat -c %a "$f")" != 666 ]; then
        log "$f is mode $(stat -c %a "$f"): only root can use verbs (chmod 666 $f for everyone)"
    fi
done
echo "export LOCO_RDMA_DEVICE=$dev LOCO_GID_INDEX=1"
