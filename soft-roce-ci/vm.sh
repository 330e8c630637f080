#!/usr/bin/env bash
# Run a command inside a throwaway qemu VM that has a Soft-RoCE device (rxe0), for hosts whose
# own kernel has no RDMA. The VM boots Debian's kernel, shares the host's / read-only and the
# work dir read-write at the same paths, so host-built binaries run unchanged.
#
# Usage: vm.sh [options] [--] CMD [ARGS...]
#   --workdir DIR   directory shared read-write and used as the command's cwd (default: $PWD)
#   --timeout SECS  kill the VM after SECS seconds, exit 124 (default: $LOCO_VM_TIMEOUT or 1200)
#   -e NAME[=VAL]   pass one more variable into the guest (repeatable)
#   --verbose       show the kernel log and the init steps on the console
#   --prepare       only download/build the cached kernel and initramfs, do not boot
#   --hub DIR --index I --addr CIDR
#                   also give the VM a virtio NIC on the Ethernet segment of soft-roce-ci/hub.py
#                   in DIR (as VM I: it sends to DIR/hub-I.sock, receives on DIR/vm-I.sock),
#                   with address CIDR, and put rxe0 on that NIC instead of a dummy netdev
#                   (what cluster.sh does)
#   -h, --help      this text
#
# The command's stdout and stderr both arrive on vm.sh's stdout (the VM's serial console);
# vm.sh's own messages go to stderr. Exit status: the command's, or 124 on timeout, or 125
# when the VM or the rxe setup failed before the command could run.
#
# In the guest: rxe0 over dummy netdev rxenet0 (192.0.2.1/24, GID index 1 = RoCE v2 IPv4),
# LOCO_RDMA_DEVICE=rxe0 LOCO_GID_INDEX=1, the host's LOCO_* and RUST_* variables plus PATH,
# HOME, USER, LANG, TERM; /tmp is an overlay on the host's /tmp, writes stay in the VM;
# stdin is /dev/null.
#
# Environment: LOCO_VM_TIMEOUT, LOCO_VM_MEM (MiB, 2048), LOCO_VM_SMP (host CPUs, max 4),
# LOCO_VM_ACCEL (auto|kvm|tcg), LOCO_VM_APPEND (extra kernel arguments), LOCO_VM_KERNEL_DEB
# (boot this linux-image .deb instead of the one linux-image-amd64 depends on),
# LOCO_SOFTROCE_CACHE (cache dir, default soft-roce-ci/.cache).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }

# Kernel modules for the initramfs, in load order (dependencies are added by modprobe).
# crc32_generic/crc32_pclmul must be loaded before rdma_rxe, which otherwise fails with
# "failed to init crc32 algorithm err:-2" and `rdma link add` reports ENOENT.
MODULES=(crc32_generic crc32_pclmul virtio_pci 9pnet_virtio 9p overlay dummy virtio_net
    sch_netem ib_core ib_uverbs rdma_rxe rdma_ucm ib_umad)

workdir=$PWD
timeout_s=${LOCO_VM_TIMEOUT:-1200}
verbose=0
prepare_only=0
extra_env=()
hub= index= addr=
while [ $# -gt 0 ]; do
    case $1 in
        --workdir) [ $# -ge 2 ] || usage 2 >&2; workdir=$2; shift ;;
        --workdir=*) workdir=${1#*=} ;;
        --timeout) [ $# -ge 2 ] || usage 2 >&2; timeout_s=$2; shift ;;
        --timeout=*) timeout_s=${1#*=} ;;
        -e) [ $# -ge 2 ] || usage 2 >&2; extra_env+=("$2"); shift ;;
        --verbose) verbose=1 ;;
        --prepare) prepare_only=1 ;;
        --hub) [ $# -ge 2 ] || usage 2 >&2; hub=$2; shift ;;
        --index) [ $# -ge 2 ] || usage 2 >&2; index=$2; shift ;;
        --addr) [ $# -ge 2 ] || usage 2 >&2; addr=$2; shift ;;
        -h | --help) usage 0 ;;
        --) shift; break ;;
        -*) log "unknown option: $1"; usage 2 >&2 ;;
        *) break ;;
    esac
    shift
done
if [ "$prepare_only" -eq 0 ] && [ $# -eq 0 ]; then
    log "no command given"
    usage 2 >&2
fi
case $timeout_s in '' | *[!0-9]*) die "--timeout wants whole seconds, got '$timeout_s'" ;; esac
if [ -n "$hub" ]; then
    [ -d "$hub" ] || die "--hub $hub: no such directory"
    case $index in '' | *[!0-9]*) die "--hub needs --index I (a whole number)" ;; esac
    [ -n "$addr" ] || die "--hub needs --addr CIDR"
fi
workdir=$(cd "$workdir" 2>/dev/null && pwd -P) || die "work dir does not exist: $workdir"
[ "$workdir" != / ] || die "the work dir cannot be / (it is shared read-write)"

t_start=$(now)

need_cmd qemu-system-x86_64 qemu-system-x86
need_cmd busybox busybox-static
need_cmd xz xz-utils
need_cmd depmod kmod
need_cmd dpkg-deb dpkg
need_cmd flock util-linux
[ -x /bin/busybox ] || die "/bin/busybox missing (package busybox-static)"
# The initramfs has no libc: Debian's plain `busybox` package is dynamically linked.
case $(ldd /bin/busybox 2>&1 || true) in
    *'not a dynamic'*) ;;
    *) die "/bin/busybox is dynamically linked; install busybox-static (install-deps.sh --vm)" ;;
esac

mkdir -p "$CACHE_DIR/kernel"
exec 9>"$CACHE_DIR/lock"

# --- kernel ------------------------------------------------------------------------------

# The linux-image package that linux-image-amd64 depends on (e.g. linux-image-6.1.0-48-amd64).
# apt-cache takes ~1 s where apt's binary cache is disabled (Docker-style images), so the answer
# is remembered until the package lists change.
kernel_pkg() {
    local stamp memo=$CACHE_DIR/kernel/apt-resolved pkg
    stamp=$(stat -c '%n %Y %s' /var/lib/apt/lists/*_Packages* 2>/dev/null | cksum)
    if [ -f "$memo" ] && [ "$(head -n1 "$memo")" = "$stamp" ]; then
        sed -n 2p "$memo"
        return
    fi
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
    [ -z "$pkg" ] || printf '%s\n%s\n' "$stamp" "$pkg" >"$memo"
    printf '%s\n' "$pkg"
}

# extract_vmlinux BZIMAGE OUT: unpack the compressed kernel inside a bzImage into an ELF file
# (the same idea as the kernel's scripts/extract-vmlinux). Debian compresses with xz; the
# other formats are tried too in case a different kernel is supplied.
extract_vmlinux() {
    local in=$1 out=$2 magic cmd off
    for pair in '\xfd7zXZ\x00:xz -dc' '\x1f\x8b\x08:gzip -dc' '\x28\xb5\x2f\xfd:zstd -dc' \
        '\x02\x21\x4c\x18:lz4 -dc' '\x5d\x00\x00\x00:xz -dc --format=lzma'; do
        magic=${pair%%:*} cmd=${pair#*:}
        command -v "${cmd%% *}" >/dev/null 2>&1 || continue
        while IFS=: read -r off _; do
            # The decompressor complains about the trailing data after the stream: ignore.
            tail -c +$((off + 1)) "$in" | $cmd >"$out" 2>/dev/null || true
            if [ "$(head -c 4 "$out" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
                return 0
            fi
        done < <(LC_ALL=C grep -obUaP "$magic" "$in" 2>/dev/null)
    done
    rm -f "$out"
    return 1
}

# prepare_kernel PKG_OR_DEB: fill $CACHE_DIR/kernel/<kver>/ with vmlinux (ELF, PVH entry),
# vmlinuz (bzImage) and the modules listed in MODULES, and print <kver>.
prepare_kernel() {
    local src=$1 tmp deb kver dir line ko args name
    tmp=$(mktemp -d "$CACHE_DIR/kernel/.tmp.XXXXXX")
    # Always called as $(prepare_kernel ...), a subshell: EXIT covers die() too.
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    if [ -f "$src" ]; then
        deb=$src
    else
        log "downloading $src (once; cached in $CACHE_DIR)"
        if ! (cd "$tmp" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "$src") >"$tmp/apt.log" 2>&1; then
            cat "$tmp/apt.log" >&2
            die "apt-get download $src failed (stale package lists? run: apt-get update)"
        fi
        deb=$(echo "$tmp"/*.deb)
    fi
    dpkg-deb -x "$deb" "$tmp/root" || die "dpkg-deb -x $deb failed"
    kver=$(cd "$tmp/root/lib/modules" && ls) || die "no /lib/modules in $deb"
    [ "$(printf '%s\n' "$kver" | wc -l)" -eq 1 ] || die "several kernels in $deb: $kver"
    dir=$tmp/out
    mkdir -p "$dir/modules"
    cp "$tmp/root/boot/vmlinuz-$kver" "$dir/vmlinuz"
    if extract_vmlinux "$dir/vmlinuz" "$dir/vmlinux"; then
        if command -v readelf >/dev/null 2>&1 && ! readelf -n "$dir/vmlinux" | grep -q 'Xen.*0x00000012'; then
            log "vmlinux has no PVH entry note; will boot the bzImage with SeaBIOS"
            rm -f "$dir/vmlinux"
        fi
    else
        log "could not unpack an ELF vmlinux; will boot the bzImage with SeaBIOS"
    fi
    depmod -b "$tmp/root" "$kver" || die "depmod failed"
    : >"$dir/modules/load.list"
    for m in "${MODULES[@]}"; do
        modprobe -d "$tmp/root" -S "$kver" --show-depends "$m" >"$tmp/deps" 2>&1 \
            || die "module $m not found in $kver: $(cat "$tmp/deps")"
        while read -r line; do
            case $line in
                insmod\ *) ;;
                *) continue ;; # builtin
            esac
            line=${line#insmod }
            ko=${line%% *}
            args=
            [ "$ko" = "$line" ] || args=${line#* }
            name=${ko##*/}
            grep -q "^$name\\b" "$dir/modules/load.list" && continue
            cp "$ko" "$dir/modules/$name"
            printf '%s %s\n' "$name" "$args" >>"$dir/modules/load.list"
        done <"$tmp/deps"
    done
    printf '%s\n' "${MODULES[*]}" >"$dir/modules.want"
    printf '%s\n' "$kver" >"$dir/kver"
    rm -rf "$CACHE_DIR/kernel/$kver"
    mv "$dir" "$CACHE_DIR/kernel/$kver"
    # Keep one kernel: drop those of earlier ABIs (~75 MB each).
    for old in "$CACHE_DIR"/kernel/*/kver; do
        old=${old%/kver}
        [ "$old" = "$CACHE_DIR/kernel/$kver" ] || rm -rf "$old"
    done
    printf '%s\n' "$kver"
}

flock 9
# Under the lock, leftovers of interrupted preparations are garbage.
rm -rf "$CACHE_DIR"/kernel/.tmp.* "$CACHE_DIR"/.initramfs.*
if [ -n "${LOCO_VM_KERNEL_DEB:-}" ]; then
    [ -f "$LOCO_VM_KERNEL_DEB" ] || die "LOCO_VM_KERNEL_DEB=$LOCO_VM_KERNEL_DEB: no such file"
    kver=$(dpkg-deb -c "$LOCO_VM_KERNEL_DEB" | sed -n 's|.*\./lib/modules/\([^/]*\)/$|\1|p' | head -n1)
    [ -f "$CACHE_DIR/kernel/$kver/kver" ] || kver=$(prepare_kernel "$LOCO_VM_KERNEL_DEB")
else
    pkg=$(kernel_pkg)
    kver=${pkg#linux-image-}
    if [ -z "$pkg" ]; then
        # No apt metadata (non-Debian host, or lists not fetched): use whatever is cached.
        kver=$(cat "$CACHE_DIR/kernel/current" 2>/dev/null || true)
        if [ -z "$kver" ] || [ ! -f "$CACHE_DIR/kernel/$kver/kver" ]; then
            die "apt knows no linux-image-amd64 and nothing is cached;" \
                "run install-deps.sh (apt-get update) or set LOCO_VM_KERNEL_DEB"
        fi
    elif [ ! -f "$CACHE_DIR/kernel/$kver/kver" ] \
        || [ "$(cat "$CACHE_DIR/kernel/$kver/modules.want" 2>/dev/null)" != "${MODULES[*]}" ]; then
        # Not cached, or cached with another module list.
        kver=$(prepare_kernel "$pkg")
    fi
fi
printf '%s\n' "$kver" >"$CACHE_DIR/kernel/current"
kdir=$CACHE_DIR/kernel/$kver

# --- initramfs ---------------------------------------------------------------------------

# First stage, run by the kernel as PID 1 from the initramfs (busybox sh). Mounts the shares,
# chroots into the host root to run guest.sh, then powers off. Any failure before the command
# reports status 125.
write_init() {
    cat <<'INIT'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin /host /ctl
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Plain \n line endings on the serial console, so the host can parse the output.
stty -onlcr 2>/dev/null
verbose=0
grep -qw loco.verbose /proc/cmdline && verbose=1 && set -x
halt() {
    sync
    poweroff -f
    reboot -f
}
fail() {
    echo "vm init: $*"
    dmesg | tail -n 20
    grep -q ' /ctl ' /proc/mounts && echo 125 >/ctl/status
    halt
}
while read -r ko args; do
    # shellcheck disable=SC2086 # args are module parameters, split on purpose
    insmod "/lib/modules/$ko" $args || echo "vm init: insmod $ko failed (continuing)"
done </lib/modules/load.list
p9='trans=virtio,version=9p2000.L,msize=512000'
mount -t 9p -o "$p9" ctl /ctl || fail "cannot mount the control share"
mount -t 9p -o "$p9,ro,cache=loose" hostroot /host || fail "cannot mount the host root"
workdir=$(cat /ctl/workdir)
guest=$(cat /ctl/guest)
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mount -t devpts devpts /host/dev/pts 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm 2>/dev/null
mount -t tmpfs -o mode=755 tmpfs /host/run
mount -t tmpfs -o mode=1777 tmpfs /host/var/tmp 2>/dev/null
# /tmp: the host's /tmp visible (binaries may live there) but writes stay in the VM.
mkdir -p /ovl && mount -t tmpfs tmpfs /ovl && mkdir -p /ovl/upper /ovl/work
mount -t overlay overlay -o lowerdir=/host/tmp,upperdir=/ovl/upper,workdir=/ovl/work /host/tmp \
    || mount -t tmpfs -o mode=1777 tmpfs /host/tmp
mkdir -p /host/run/loco-ctl && mount --bind /ctl /host/run/loco-ctl
ip link set lo up
mkdir -p "/host$workdir" 2>/dev/null # only matters under the guest's own /run
mount -t 9p -o "$p9" work "/host$workdir" || fail "cannot mount the work dir at $workdir"
# The guest's clock runs on the TSC at the rate the kernel measured at boot against the emulated
# HPET, refined a few seconds later by at most 1%. A first measurement far off (the host busy
# just then) keeps its wrong rate for good, silently, and every timeout in the guest with it (a
# CI run once saw a 17 s VM report a 158 s wait). Such a clock is never refined: fall back to
# the HPET, slower to read but right.
cs=/sys/devices/system/clocksource/clocksource0/current_clocksource
i=0
while [ "$(cat $cs)" = tsc-early ] && [ $i -lt 100 ]; do
    usleep 100000
    i=$((i + 1))
done
if [ "$(cat $cs)" != hpet ] && ! dmesg | grep -q 'Refined TSC clocksource calibration'; then
    echo "vm init: the TSC's boot calibration was not confirmed ($(dmesg | grep -m1 'tsc: Detected')); the clock falls back to the HPET"
    echo hpet >$cs || echo "vm init: could not switch the clock to the HPET"
fi
[ $verbose = 1 ] && set +x
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    chroot /host /bin/bash "$guest" </dev/null
[ -s /ctl/status ] || fail "guest.sh ended without a status"
umount "/host$workdir"
umount /host/run/loco-ctl
umount /ctl
halt
INIT
}

initramfs_key=$( { write_init; cat "$kdir/modules/load.list"; sha256sum /bin/busybox; } | sha256sum | cut -c1-16)
initramfs=$kdir/initramfs-$initramfs_key.cpio
rm -f "$kdir"/*.cpio.tmp
if [ ! -f "$initramfs" ]; then
    tmp=$(mktemp -d "$CACHE_DIR/.initramfs.XXXXXX")
    mkdir -p "$tmp/bin" "$tmp/lib/modules"
    cp /bin/busybox "$tmp/bin/busybox"
    write_init >"$tmp/init"
    chmod 755 "$tmp/init"
    cp "$kdir/modules/"* "$tmp/lib/modules/"
    # Uncompressed: decompressing under TCG costs more than reading a few MB.
    (cd "$tmp" && find . | busybox cpio -o -H newc -R 0:0 2>/dev/null) >"$initramfs.tmp"
    mv "$initramfs.tmp" "$initramfs"
    rm -rf "$tmp"
    for old in "$kdir"/initramfs-*.cpio; do
        [ "$old" = "$initramfs" ] || rm -f "$old"
    done
fi
flock -u 9

t_prepared=$(now)
if [ "$prepare_only" -eq 1 ]; then
    log "kernel $kver and initramfs ready in $kdir ($(elapsed "$t_start") s)"
    exit 0
fi

# --- control share: what guest.sh runs -----------------------------------------------------

ctl=$(mktemp -d "${TMPDIR:-/tmp}/loco-vm.XXXXXX")
trap 'rm -rf "$ctl"' EXIT
printf '%s\n' "$workdir" >"$ctl/workdir"
printf '%s\n' "$SRC_DIR/guest.sh" >"$ctl/guest"
[ -z "$hub" ] || printf 'eth0 %s\n' "$addr" >"$ctl/net"
{
    for name in $(compgen -e); do
        case $name in
            LOCO_* | RUST_* | PATH | HOME | USER | LOGNAME | LANG | LC_* | TERM | TZ) ;;
            *) continue ;;
        esac
        printf 'export %s=%q\n' "$name" "${!name}"
    done
    for kv in "${extra_env[@]+"${extra_env[@]}"}"; do
        name=${kv%%=*}
        case $name in '' | [0-9]* | *[!A-Za-z0-9_]*) die "-e $kv: bad variable name" ;; esac
        if [ "$name" = "$kv" ]; then
            printf 'export %s=%q\n' "$name" "${!name-}"
        else
            printf 'export %s=%q\n' "$name" "${kv#*=}"
        fi
    done
    # The tools the rxe setup used stay reachable whatever the host PATH was.
    printf 'export PATH=%q\n' "${PATH:-/usr/bin:/bin}:/usr/sbin:/sbin"
    printf 'export LOCO_RDMA_DEVICE=rxe0 LOCO_GID_INDEX=1\n'
    printf 'LOCO_VM_WORKDIR=%q\n' "$workdir"
    printf 'LOCO_VM_CMD=('
    printf '%q ' "$@"
    printf ')\n'
} >"$ctl/env"

# --- qemu --------------------------------------------------------------------------------

accel=${LOCO_VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
    accel=tcg
    # /dev/kvm on this project's machines is nested PVM: `-cpu host` aborts ("failed to set
    # MSR 0x10a") and other models hang during boot. Only a real KVM is worth using.
    if [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ ! -e /sys/module/kvm_pvm ]; then
        accel=kvm
    fi
fi
case $accel in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    tcg) accel_args=(-accel "tcg,thread=multi" -cpu max) ;;
    *) die "LOCO_VM_ACCEL must be auto, kvm or tcg, not '$accel'" ;;
esac
ncpu=$(nproc)
smp=${LOCO_VM_SMP:-$((ncpu > 4 ? 4 : ncpu))}

# tsc=reliable: the kernel's TSC sync check fails under TCG and falls back to the HPET, whose
# every read is emulated MMIO (no vDSO): clock_gettime gets slow and boot takes longer. TCG's
# TSC is the host's, monotonic across vCPUs, so trusting it is safe. acpi=noirq skips the slow
# AML evaluation of the PCI interrupt links (virtio uses MSI-X); cryptomgr.notests and
# no_timer_check skip boot-time self tests. Together ~1.5 s less to the command.
cmdline="console=ttyS0 panic=-1 mitigations=off tsc=reliable no_timer_check cryptomgr.notests acpi=noirq"
# Under TCG the guest's TSC is the host's: tell the guest its rate, so that it does not have to
# measure it at boot against an emulated timer while the host may be busy (the init checks the
# result either way). Only when the host's kernel log says it.
if [ "$accel" = tcg ]; then
    tsc_khz=$(dmesg 2>/dev/null | sed -n -E 's/.*tsc: (Refined TSC clocksource calibration|Detected):? ([0-9]+)\.([0-9]{3}) MHz.*/\2\3/p' | tail -n 1)
    [ -z "$tsc_khz" ] || cmdline="$cmdline tsc_early_khz=$tsc_khz"
fi
if [ "$verbose" -eq 1 ]; then
    cmdline="$cmdline loco.verbose"
else
    cmdline="$cmdline quiet loglevel=0"
fi
cmdline="$cmdline ${LOCO_VM_APPEND:-}"
if [ -f "$kdir/vmlinux" ]; then
    # PVH entry straight into the ELF kernel, with the tiny qboot firmware: ~2.5 s faster.
    boot_args=(-bios /usr/share/qemu/qboot.rom -kernel "$kdir/vmlinux")
    [ -f /usr/share/qemu/qboot.rom ] || boot_args=(-kernel "$kdir/vmlinux")
else
    boot_args=(-kernel "$kdir/vmlinuz")
fi

# -M microvm would skip PCI/ACPI set-up, but under TCG the kernel finds no clock to
# calibrate the TSC against and hangs; -M pc it is.
virtfs=security_model=none,multidevs=remap
qemu=(qemu-system-x86_64 -M pc "${accel_args[@]}" -m "${LOCO_VM_MEM:-2048}" -smp "$smp"
    -nodefaults -no-user-config -display none -no-reboot
    -chardev "stdio,id=con,signal=off" -serial chardev:con
    "${boot_args[@]}" -initrd "$initramfs" -append "$cmdline"
    -virtfs "local,path=/,mount_tag=hostroot,readonly=on,$virtfs"
    -virtfs "local,path=$workdir,mount_tag=work,$virtfs"
    -virtfs "local,path=$ctl,mount_tag=ctl,$virtfs")
if [ -n "$hub" ]; then
    rm -f "$hub/vm-$index.sock"
    qemu+=(-netdev "dgram,id=seg,local.type=unix,local.path=$hub/vm-$index.sock,remote.type=unix,remote.path=$hub/hub-$index.sock"
        -device "virtio-net-pci,netdev=seg,mac=52:54:00:4c:00:$(printf %02x $((index + 1)))")
fi
[ "$verbose" -eq 0 ] || log "${qemu[*]}"

# qemu runs under `timeout`, which puts it in a process group of its own, so a Ctrl-C or a
# SIGTERM sent to vm.sh would not reach it: forward those signals (timeout passes them on).
t_boot=$(now)
timeout --kill-after=10 "$timeout_s" "${qemu[@]}" </dev/null &
qpid=$!
caught=
# shellcheck disable=SC2317 # called from the traps
forward() { caught=$1; kill -TERM "$qpid" 2>/dev/null || true; }
trap 'forward 130' INT
trap 'forward 143' TERM
trap 'forward 129' HUP
set +e
wait "$qpid"
qrc=$?
while kill -0 "$qpid" 2>/dev/null; do
    wait "$qpid"
    qrc=$?
done
set -e
if [ -n "$caught" ]; then
    log "interrupted; VM stopped"
    exit "$caught"
fi

if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    log "timed out after $timeout_s s (--timeout / LOCO_VM_TIMEOUT); VM killed"
    exit 124
fi
if [ -f "$ctl/ready" ]; then
    to_cmd=$(awk -v s="$t_boot" -v r="$(stat -c %.3Y "$ctl/ready")" 'BEGIN { printf "%.1f", r - s }')
    timing="prepare $(awk -v s="$t_start" -v e="$t_prepared" 'BEGIN { printf "%.1f", e - s }') s, boot to command $to_cmd s, total $(elapsed "$t_start") s"
else
    timing="total $(elapsed "$t_start") s"
fi
status=$(cat "$ctl/status" 2>/dev/null || true)
case $status in
    '' | *[!0-9]*)
        log "the VM ended without reporting a status (qemu exit $qrc; $timing); rerun with --verbose"
        exit 125
        ;;
esac
if [ "$status" -eq 125 ] && [ ! -f "$ctl/ready" ]; then
    log "VM setup failed before the command ran ($timing)"
else
    log "exit status $status ($timing)"
fi
exit "$status"
