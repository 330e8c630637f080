# shellcheck shell=bash
# Shared helpers for the soft-roce-ci scripts. Source it; it defines functions only.

# Directory of these scripts and the download/build cache beneath it (gitignored).
# shellcheck disable=SC2034 # used by the scripts that source this file
SRC_DIR=${BASH_SOURCE[0]%/*}
[ "$SRC_DIR" != "${BASH_SOURCE[0]}" ] || SRC_DIR=.
SRC_DIR=$(cd "$SRC_DIR" && pwd)
CACHE_DIR=${LOCO_SOFTROCE_CACHE:-$SRC_DIR/.cache}

# Messages go to stderr so that a command's own stdout stays clean.
log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# Run as root, through sudo if we are not root already.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# need_cmd CMD PACKAGE: fail with a hint at install-deps.sh when CMD is missing.
need_cmd() {
    command -v "$1" >/dev/null 2>&1 \
        || die "'$1' not found (package $2); run soft-roce-ci/install-deps.sh"
}

# Seconds since the epoch with milliseconds, for timings.
now() { date +%s.%N | cut -c1-14; }

# elapsed START: seconds since START (from now()) with one decimal.
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# perftest_server DEV GID_INDEX: the address a perftest client on this host reaches the server
# on DEV at: the device's own IPv4 address (from its IPv4-mapped GID, ::ffff:a.b.c.d), else
# 127.0.0.1 (the out-of-band TCP exchange works there too without rdma_cm). Fails if the GID
# is not populated within 5 s.
perftest_server() {
    local gid hex
    gid=$(wait_gid "$1" "$2" 5) || return 1
    case $gid in
        0000:0000:0000:0000:0000:ffff:*)
            hex=${gid#0000:0000:0000:0000:0000:ffff:}
            hex=${hex//:/}
            echo "$((16#${hex:0:2})).$((16#${hex:2:2})).$((16#${hex:4:2})).$((16#${hex:6:2}))"
            ;;
        *) echo 127.0.0.1 ;;
    esac
}

# wait_gid DEV INDEX TIMEOUT_S: wait until the GID at INDEX of DEV port 1 is non-zero and
# print it. Reads sysfs with builtins only (it runs in the VM, where every exec is slow).
wait_gid() {
    local dev=$1 idx=$2 tries=$(($3 * 20)) gid
    local f=/sys/class/infiniband/$dev/ports/1/gids/$idx
    while [ "$tries" -gt 0 ]; do
        gid=
        { read -r gid <"$f"; } 2>/dev/null || true
        case $gid in
            '' | 0000:0000:0000:0000:0000:0000:0000:0000) ;;
            *) printf '%s\n' "$gid"; return 0 ;;
        esac
        sleep 0.05
        tries=$((tries - 1))
    done
    return 1
}

# rxe_add DEV NETDEV [CIDR]: make sure the rxe device DEV exists on top of NETDEV and that its
# RoCE v2 IPv4 GID (index 1) is populated. NETDEV is created as a dummy interface (MTU 9000, so
# the rxe active MTU is 4096) when it does not exist yet; CIDR, if given, is added to it.
# Needs rdma_rxe loaded, root, and `ip`/`rdma` from iproute2.
rxe_add() {
    local dev=$1 netdev=$2 cidr=${3:-} batch=
    if [ ! -e "/sys/class/net/$netdev" ]; then
        batch="link add $netdev type dummy"$'\n'"link set $netdev mtu 9000"$'\n'
        [ -z "$cidr" ] || batch+="addr add $cidr dev $netdev"$'\n'
    elif [ -n "$cidr" ] && ! ip -o addr show dev "$netdev" | grep -qw "${cidr%/*}"; then
        batch="addr add $cidr dev $netdev"$'\n'
    fi
    batch+="link set $netdev up"
    # One `ip` process for all of it: a batch.
    printf '%s\n' "$batch" | ip -batch - || return 1
    if [ ! -e "/sys/class/infiniband/$dev" ]; then
        rdma link add "$dev" type rxe netdev "$netdev" || return 1
    fi
    wait_gid "$dev" 1 10 >/dev/null || {
        log "GID index 1 of $dev never appeared (does $netdev have an IPv4 address?)"
        return 1
    }
}
