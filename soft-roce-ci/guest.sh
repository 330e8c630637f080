#!/usr/bin/env bash
# Second stage of vm.sh, run INSIDE the VM by the initramfs's /init after it has chrooted into
# the host's root (shared read-only over virtfs). Creates rxe0, runs the command in the work
# dir, and writes its exit status to the control share. Not meant to be run by hand.
#
# Protocol with vm.sh (control share mounted at /run/loco-ctl):
#   env     bash source text: exports + LOCO_VM_CMD=(...) + LOCO_VM_WORKDIR=...
#   ready   created just before the command starts (its mtime times the boot)
#   status  the command's exit status, or 125 if the rxe setup failed
set -uo pipefail
ctl=/run/loco-ctl
# shellcheck source=lib.sh
. "${BASH_SOURCE[0]%/*}/lib.sh"

finish() { echo "$1" >"$ctl/status"; exit 0; }

# On a cluster.sh segment: rxe0 on the virtio NIC, with the VM's own address; alone: on a dummy.
netdev=rxenet0 cidr=192.0.2.1/24
[ -f "$ctl/net" ] && read -r netdev cidr <"$ctl/net"
if ! rxe_add rxe0 "$netdev" "$cidr"; then
    log "rxe setup failed; kernel log:"
    dmesg | tail -n 20 >&2
    finish 125
fi

# shellcheck disable=SC1091 # generated per run by vm.sh
. "$ctl/env" || { log "cannot read $ctl/env"; finish 125; }

cd "$LOCO_VM_WORKDIR" || finish 125
: >"$ctl/ready"
"${LOCO_VM_CMD[@]}" </dev/null
finish $?
