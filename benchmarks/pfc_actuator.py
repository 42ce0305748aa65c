"""PFC actuator latency: pause and resume of the lossless class's tbf leaf (dataplane/pfc_gate.py).

A veth pair (named with a fresh run id, removed at the end) gets the
``htb_classes`` queues of a 10 Mbit/s switch port (150 KB lossless buffer). A
thread keeps the lossless class backlogged: a blocking AF_PACKET socket with a
small send buffer sends 1042-byte IPv4/UDP frames with DSCP 26 out of one
end (like a sender that blocks when its NIC queue is full); another thread
stamps every frame arriving at the other end. Then ``--cycles`` times:
pause (hold for ``--pause-ms``), resume (open for ``--open-ms``), each through
the same :class:`~dataplane.pfc_gate.ClassGate` the controller's loop uses.

Printed, p50 / p99 / max:

- pause: decision (the call) to the kernel's netlink ack, us; frames that
  still arrived after the ack (tbf refills its bucket on a change: at most one
  frame may leave, module doc of gate.py);
- resume: decision to the kick frame sent, us; decision to the first data
  frame seen at the far end, us ("first packet after resume");
- drops of the lossless leaf over the whole run (must be 0).

Target (issue 7): pause and resume each effective within 2 ms, 0 drops.
Needs root; takes about ``cycles x (pause + open)`` (8 s by default).
"""
from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane.pfc_gate import ClassGate, kick_socket  # noqa: E402
from dataplane.rtnetlink import Netlink  # noqa: E402
from dataplane.queues import QueueConfig, get  # noqa: E402
from dataplane.queues.base import TrafficClass  # noqa: E402
from testbed.host.runlock import RunLock  # noqa: E402
from topology.naming import new_run_id  # noqa: E402

RATE_BPS, MTU, BUFFER = 10e6, 1500, 150_000
ETH_P_ALL = 0x0003


def data_frame(src_mac: bytes) -> bytes:
    """A 1042-byte Ethernet/IPv4/UDP frame with DSCP 26 (the lossless class), to a made-up host."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 26 << 2, 1028, 0, 0x4000, 64, 17, 0, bytes([10, 99, 0, 1]),
                     bytes([10, 99, 0, 2]))
    return b"\x02\x00\x00\x00\x00\x02" + src_mac + b"\x08\x00" + ip + struct.pack("!HHHH", 4791, 4791, 1008, 0) \
        + bytes(1000)


def leaf_stats(ifname: str) -> dict:
    """tbf 20: (the lossless leaf) sent packets and drops, from ``tc -s``."""
    out = subprocess.run(["tc", "-s", "qdisc", "show", "dev", ifname], capture_output=True, text=True).stdout
    block = out.split("qdisc tbf 20:")[1]
    sent = int(block.split("Sent ")[1].split()[2])
    drops = int(block.split("dropped ")[1].split(",")[0])
    return {"sent_pkts": sent, "drops": drops}


def pct(a) -> str:
    a = np.asarray(a, dtype=float)
    return f"p50 {np.percentile(a, 50):8.0f}  p99 {np.percentile(a, 99):8.0f}  max {a.max():8.0f}"


def run(cycles: int, pause_ms: float, open_ms: float) -> int:
    rid = new_run_id()
    a, b = f"{rid}pa", f"{rid}pb"
    with RunLock(rid):
        subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
        try:
            for i in (a, b):
                subprocess.run(["ip", "link", "set", i, "up"], check=True)
            return _measure(a, b, cycles, pause_ms, open_ms)
        finally:
            subprocess.run(["ip", "link", "del", a], check=False)


def _measure(a: str, b: str, cycles: int, pause_ms: float, open_ms: float) -> int:
    from pyroute2 import IPRoute

    cfg = QueueConfig(rate_bps=RATE_BPS, mtu_bytes=MTU, classes=(
        TrafficClass(30_000, dscp=(48,), priority=0), TrafficClass(BUFFER, dscp=(26,), priority=1),
        TrafficClass(BUFFER, priority=2)))
    stop = threading.Event()
    arrivals: list[int] = []

    def receive():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((b, 0))
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                data = s.recv(2048)
            except socket.timeout:
                continue
            if len(data) > 1000:
                arrivals.append(time.monotonic_ns())

    def send(frame: bytes):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32_768)
        s.bind((a, 0))
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                s.send(frame)
            except (socket.timeout, BlockingIOError):
                continue

    with IPRoute() as ipr:
        get("htb_classes").install(ipr, a, cfg)
        mac = bytes.fromhex(ipr.get_links(ipr.link_lookup(ifname=a)[0])[0].get_attr("IFLA_ADDRESS").replace(":", ""))
        gate = ClassGate(ipr, Netlink(), kick_socket(), a, 1, RATE_BPS, MTU, BUFFER)
        threads = [threading.Thread(target=receive, daemon=True),
                   threading.Thread(target=send, args=(data_frame(mac),), daemon=True)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        pause_us, leaked, resume_us, first_us = [], [], [], []
        for _ in range(cycles):
            t0 = time.monotonic_ns()
            pause_us.append(gate.pause() / 1e3)
            ack = t0 + int(pause_us[-1] * 1e3)
            time.sleep(pause_ms / 1e3)
            leaked.append(sum(1 for t in arrivals[-50:] if t > ack))
            t1 = time.monotonic_ns()
            resume_us.append(gate.resume() / 1e3)
            deadline = time.monotonic() + open_ms / 1e3
            while time.monotonic() < deadline:
                time.sleep(0.0002)
            after = [t for t in arrivals[-200:] if t > t1]
            first_us.append((after[0] - t1) / 1e3 if after else float("inf"))
        stop.set()
        for t in threads:
            t.join(timeout=2)
        stats = leaf_stats(a)
    print(f"PFC actuator on a 10 Mbit/s htb_classes port, {cycles} cycles of {pause_ms:g} ms paused / "
          f"{open_ms:g} ms open, lossless class backlogged")
    print(f"pause:  decision -> netlink ack, us         {pct(pause_us)}")
    print(f"        frames arriving after the ack       {pct(leaked)}")
    print(f"resume: decision -> kick frame sent, us     {pct(resume_us)}")
    print(f"        decision -> first packet after, us  {pct(first_us)}")
    print(f"lossless leaf: {stats['sent_pkts']} packets sent, {stats['drops']} dropped")
    ok = (np.percentile(pause_us, 99) <= 2000 and np.percentile(first_us, 99) <= 2000 and stats["drops"] == 0)
    print("PASS" if ok else "FAIL", "(target: pause and resume p99 within 2 ms, 0 drops)")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--pause-ms", type=float, default=20.0)
    ap.add_argument("--open-ms", type=float, default=20.0)
    args = ap.parse_args()
    return run(args.cycles, args.pause_ms, args.open_ms)


if __name__ == "__main__":
    sys.exit(main())
