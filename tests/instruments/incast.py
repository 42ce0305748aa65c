"""Paced UDP incast for lossless-class checks (case C07): senders at a set rate and class, one receiver.

Each sender sends ``total_bytes`` of 1000-byte datagrams to the receiver at
``rate_bps`` (frame bits on the wire: payload + UDP, IP and Ethernet headers),
with the IP TOS of the class (DSCP 26 << 2 = 0x68: the lossless class; 0: the
lossy class), from a blocking socket with a small send buffer: like an RNIC, a
sender whose NIC queue is paused or full waits instead of dropping. Late
datagrams go at once (no catch-up cap), as a NIC drains its queue after a
pause. Each datagram carries its sender's sequence number.

The receiver counts datagrams and bytes per sender until nothing arrived for
``idle_s`` (after the first) or ``max_s`` passed, and prints one JSON line.

Host side: ``python -m tests.instruments.incast send DST PORT TOS RATE_BPS TOTAL_BYTES`` (prints
``{"sent_bytes", "datagrams", "seconds"}``) and ``... recv PORT IDLE_S MAX_S`` (prints
``{"bytes": {src: n}, "datagrams": {src: n}, "seconds"}``).
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time
from pathlib import Path

PAYLOAD_BYTES = 1000
#: UDP 8 + IPv4 20 + Ethernet 14
FRAME_BYTES = PAYLOAD_BYTES + 42
SNDBUF_BYTES = 16_384
TOS_LOSSLESS, TOS_LOSSY = 26 << 2, 0
#: the repository root: host-side runs (``python -m tests.instruments.incast``) start there
ROOT = Path(__file__).resolve().parents[2]


def send(dst: str, port: int, tos: int, rate_bps: float, total_bytes: int) -> dict:
    """Send ``total_bytes`` (whole datagrams) to ``dst:port`` at ``rate_bps``; return the counts."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
    n = -(-total_bytes // PAYLOAD_BYTES)
    gap_s = FRAME_BYTES * 8 / rate_bps
    pad = bytes(PAYLOAD_BYTES - 4)
    t0 = time.monotonic()
    for k in range(n):
        wait = t0 + k * gap_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        s.sendto(struct.pack("!I", k) + pad, (dst, port))
    return {"sent_bytes": n * PAYLOAD_BYTES, "datagrams": n, "seconds": round(time.monotonic() - t0, 3)}


def recv(port: int, idle_s: float, max_s: float) -> dict:
    """Count what arrives on ``port`` per source address (module doc)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    s.settimeout(max_s)
    nbytes: dict[str, int] = {}
    count: dict[str, int] = {}
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        try:
            data, (src, _) = s.recvfrom(65536)
        except socket.timeout:
            break
        nbytes[src] = nbytes.get(src, 0) + len(data)
        count[src] = count.get(src, 0) + 1
        s.settimeout(idle_s)
    return {"bytes": nbytes, "datagrams": count, "seconds": round(time.monotonic() - t0, 3)}


def run_incast(fab, senders: list[int], receiver: int, tos: int, rate_bps: float, total_bytes: int,
               port: int = 47_930, idle_s: float = 1.5) -> dict:
    """Run one incast on the running Fabric ``fab`` (host ranks); return ``{"sent": {ip: bytes},
    "received": {ip: bytes}, "t_start_ns", "t_end_ns"}`` (Unix-epoch ns). RuntimeError when a side fails."""
    py = sys.executable
    max_s = total_bytes * 8 * len(senders) / rate_bps * 4 + 10
    rx = fab.host(receiver).popen([py, "-m", "tests.instruments.incast", "recv", str(port), str(idle_s), str(max_s)],
                                  stdout=-1, stderr=-1, text=True, cwd=ROOT)
    time.sleep(0.3)
    dst = fab.layout.hosts[receiver].ip
    t_start_ns = time.time_ns()
    tx = {fab.layout.hosts[r].ip: fab.host(r).popen(
        [py, "-m", "tests.instruments.incast", "send", dst, str(port), str(tos), str(rate_bps), str(total_bytes)],
        stdout=-1, stderr=-1, text=True, cwd=ROOT) for r in senders}
    sent = {}
    for ip, p in tx.items():
        out, err = p.communicate(timeout=max_s)
        if p.returncode != 0:
            raise RuntimeError(f"sender {ip} failed: {err.strip()[-400:]}")
        sent[ip] = json.loads(out.strip().splitlines()[-1])["sent_bytes"]
    out, err = rx.communicate(timeout=max_s + 10)
    if rx.returncode != 0:
        raise RuntimeError(f"receiver failed: {err.strip()[-400:]}")
    got = json.loads(out.strip().splitlines()[-1])["bytes"]
    return {"sent": sent, "received": {ip: got.get(ip, 0) for ip in sent}, "t_start_ns": t_start_ns,
            "t_end_ns": time.time_ns()}


if __name__ == "__main__":
    if sys.argv[1] == "send":
        print(json.dumps(send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                              int(sys.argv[6]))), flush=True)
    elif sys.argv[1] == "recv":
        print(json.dumps(recv(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} send DST PORT TOS RATE_BPS TOTAL_BYTES | recv PORT IDLE_S MAX_S")
