#!/usr/bin/env python3
"""The Ethernet switch of soft-roce-ci/cluster.sh: joins N qemu VMs into one segment that exists
only as unix-domain datagram sockets in DIR (no host IP address, no multicast on the host).

VM i's qemu sends its frames to DIR/hub-i.sock and receives on DIR/vm-i.sock (qemu's `dgram`
netdev). The hub learns which port each source MAC is on and forwards a frame to that port, or
floods it (broadcasts, unknown destinations). Control, one line per datagram on DIR/ctl.sock:

    cut I        drop every frame from and to VM I (a partition: no FIN, no link event)
    heal I       forward VM I's frames again
    stats        reply (to the sender's socket) with frames forwarded/dropped per port

Usage: hub.py DIR N            (runs until killed; prints "hub ready" once bound)
"""
import os
import socket
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base, n = sys.argv[1], int(sys.argv[2])
    ports = []
    for i in range(n):
        path = os.path.join(base, f"hub-{i}.sock")
        if os.path.exists(path):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        ports.append(s)
    ctl_path = os.path.join(base, "ctl.sock")
    if os.path.exists(ctl_path):
        os.unlink(ctl_path)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ctl.bind(ctl_path)
    peers = [os.path.join(base, f"vm-{i}.sock") for i in range(n)]
    where = {}  # MAC -> port
    cut = set()
    fwd = [0] * n
    dropped = [0] * n
    print("hub ready", flush=True)

    def send(j, frame):
        if j in cut:
            dropped[j] += 1
            return
        try:
            ports[j].sendto(frame, peers[j])
            fwd[j] += 1
        except OSError:
            # That VM is not up (yet), or gone: the frame is lost, as on a real wire.
            dropped[j] += 1

    import select

    socks = ports + [ctl]
    while True:
        ready, _, _ = select.select(socks, [], [])
        for s in ready:
            if s is ctl:
                msg, sender = ctl.recvfrom(256)
                words = msg.decode(errors="replace").split()
                reply = "ok"
                if len(words) == 2 and words[0] in ("cut", "heal") and words[1].isdigit():
                    i = int(words[1])
                    if i >= n:
                        reply = f"no VM {i}"
                    elif words[0] == "cut":
                        cut.add(i)
                    else:
                        cut.discard(i)
                elif words == ["stats"]:
                    reply = " ".join(f"vm{i}:fwd={fwd[i]},dropped={dropped[i]}" for i in range(n))
                else:
                    reply = f"unknown command: {msg!r}"
                if sender:
                    try:
                        ctl.sendto(reply.encode(), sender)
                    except OSError:
                        pass
                continue
            i = ports.index(s)
            frame = s.recv(65536)
            if len(frame) < 14:
                continue
            if i in cut:
                dropped[i] += 1
                continue
            dst, src = frame[0:6], frame[6:12]
            if not src[0] & 1:
                where[src] = i
            j = where.get(dst)
            if dst[0] & 1 or j is None:
                for k in range(n):
                    if k != i:
                        send(k, frame)
            elif j != i:
                send(j, frame)


if __name__ == "__main__":
    main()
