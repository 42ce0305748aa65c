"""Speed of the RoCEv2 fast path (traffic.wire): packets built per second.

Run: python benchmarks/wire_speed.py [--packets N]
Prints one line per measurement. Target: >= 100,000 data packets/s built with
1024-byte payloads (measured on this machine class: a UDP socket sending prebuilt bytes reached
over 300,000 packets/s here, scapy about 1,100 packets/s).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from traffic import wire  # noqa: E402


def _rate(fn, n: int) -> float:
    """Best of 3 runs of ``fn(n)``; returns calls per second."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def bench_data(n: int, payload_bytes: int = 1024) -> float:
    b = wire.DataPacketBuilder("10.0.1.1", "10.0.2.1", 49152, payload_bytes)
    build = b.build
    op_mid = wire.Opcode.RC_SEND_MIDDLE

    def run(k: int) -> None:
        psn = 0
        for i in range(k):
            build(op_mid, 0x11, psn, False, 1, i, payload_bytes)
            psn = (psn + 1) & wire.PSN_MAX
    return _rate(run, n)


def bench_ack(n: int) -> float:
    b = wire.AckPacketBuilder("10.0.2.1", "10.0.1.1", 49152)
    build = b.build

    def run(k: int) -> None:
        for i in range(k):
            build(0x11, i & wire.PSN_MAX, False, i & wire.MSN_MAX)
    return _rate(run, n)


def bench_unpack(n: int) -> float:
    b = wire.DataPacketBuilder("10.0.1.1", "10.0.2.1", 49152)
    pkt = bytes(b.build(wire.Opcode.RC_SEND_ONLY, 0x11, 5, True, 1, 0, 1024))
    unpack = wire.unpack_bth

    def run(k: int) -> None:
        for _ in range(k):
            unpack(pkt)
    return _rate(run, n)


def bench_icrc_generic(n: int) -> float:
    b = wire.DataPacketBuilder("10.0.1.1", "10.0.2.1", 49152)
    b.build(wire.Opcode.RC_SEND_ONLY, 0x11, 5, True, 1, 0, 1024)
    ip = bytes(b.ip_packet())
    iph, udph, ib = ip[:20], ip[20:28], ip[28:-4]

    def run(k: int) -> None:
        for _ in range(k):
            wire.icrc_ipv4(iph, udph, ib)
    return _rate(run, n)


def bench_build_sendto_loopback(n: int) -> float:
    """build + sendto over loopback (127.0.0.1 only; the receiver never reads)."""
    import socket
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    dst = rx.getsockname()
    b = wire.DataPacketBuilder("127.0.0.1", "127.0.0.1", tx.getsockname()[1])
    build, send = b.build, tx.sendto

    def run(k: int) -> None:
        for i in range(k):
            send(build(1, 0x11, i & wire.PSN_MAX, False, 1, i, 1024), dst)
    try:
        return _rate(run, n)
    finally:
        tx.close()
        rx.close()


def bench_scapy(n: int) -> float:
    from scapy.all import raw
    from traffic.roce import frame
    payload = bytes(1024)

    def run(k: int) -> None:
        for i in range(k):
            raw(frame("10.0.1.1", "10.0.2.1", 49152, 1, 0x11, i, payload))
    return _rate(run, n)


def import_ms() -> float:
    code = ("import time; t=time.perf_counter(); import traffic.wire; "
            "print((time.perf_counter()-t)*1e3)")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, check=True)
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000)
    n = ap.parse_args().packets
    print(f"python {sys.version.split()[0]}, {n} packets per run, best of 3")
    note = (" (PYTHONDONTWRITEBYTECODE is set: includes compiling the source)"
            if os.environ.get("PYTHONDONTWRITEBYTECODE") else "")
    print(f"import traffic.wire: {import_ms():.1f} ms{note}")
    rate = bench_data(n)
    print(f"DataPacketBuilder.build, 1024 B payload: {rate:,.0f} packets/s "
          f"({rate * 1024 * 8 / 1e9:.2f} Gbit/s of payload)  target >= 100,000: "
          f"{'OK' if rate >= 100_000 else 'BELOW TARGET'}")
    print(f"DataPacketBuilder.build, 256 B payload: {bench_data(n, 256):,.0f} packets/s")
    print(f"AckPacketBuilder.build: {bench_ack(n):,.0f} packets/s")
    print(f"unpack_bth: {bench_unpack(n):,.0f} calls/s")
    print(f"icrc_ipv4 (no prefix cache), 1024 B payload: {bench_icrc_generic(n // 4):,.0f} calls/s")
    print(f"build + sendto over loopback, 1024 B payload: "
          f"{bench_build_sendto_loopback(n // 2):,.0f} packets/s")
    print(f"scapy frame + raw, 1024 B payload: {bench_scapy(max(200, n // 500)):,.0f} packets/s")


if __name__ == "__main__":
    main()
