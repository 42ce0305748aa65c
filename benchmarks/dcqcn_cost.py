"""CPU cost of DCQCN on the transport's fast path (no root, loopback, no fabric).

1. The endpoint's receive: plain ``recv_into`` (congestion control ``none``) against
   ``recvmsg_into`` with IP_RECVTOS (what the endpoint does when a notification point needs
   each packet's ECN bits): ``--packets`` 1066-byte datagrams over loopback, receive CPU
   time per packet.
2. The reaction point's hooks per sent packet: ``next_send_ns`` + ``on_send`` (+ a CNP per
   CNP interval) of :class:`traffic.transport.cc.Dcqcn` under lasting congestion (dilation 100
   timers), against :class:`NoCongestionControl`.

Prints microseconds per packet. Usage: ``python benchmarks/dcqcn_cost.py [--packets 200000]``
"""
from __future__ import annotations

import argparse
import socket
import time

from traffic.transport.cc import Dcqcn, DcqcnSettings, NoCongestionControl

FRAME = b"\x00" * 1066


def recv_cost_us(n: int, read_ecn: bool) -> float:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    if read_ecn:
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x6B)  # DSCP 26, CE
    buf, anc = bytearray(9000), socket.CMSG_SPACE(4)
    got, cpu = 0, 0.0
    batch = 2000  # stays below the receive buffer
    while got < n:
        for _ in range(batch):
            tx.sendto(FRAME, rx.getsockname())
        t0 = time.thread_time()
        for _ in range(batch):
            if read_ecn:
                _, cmsgs, _, _ = rx.recvmsg_into([buf], anc)
                _ = bool(cmsgs) and (cmsgs[0][2][0] & 3) == 3
            else:
                rx.recv_into(buf)
        cpu += time.thread_time() - t0
        got += batch
    rx.close()
    tx.close()
    return cpu / got * 1e6


def hooks_cost_us(n: int, cc) -> float:
    """Per packet: next_send_ns + on_send, one frame time (10 Mbit/s) apart, and a CNP every 6th
    packet (one per 5 ms CNP interval: lasting congestion, the timers keep running)."""
    t, gap = 0, 853_000
    t0 = time.thread_time()
    for i in range(n):
        t += gap
        if i % 6 == 0:
            cc.on_cnp(t)
        cc.next_send_ns(t)
        cc.on_send(1066, t)
    return (time.thread_time() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000)
    n = ap.parse_args().packets
    plain, ecn = recv_cost_us(n, False), recv_cost_us(n, True)
    print(f"receive: recv_into {plain:.2f} us/pkt, recvmsg_into + IP_RECVTOS {ecn:.2f} us/pkt (+{ecn - plain:.2f})")
    s = DcqcnSettings(rate_timer_us=5500.0, alpha_timer_us=5500.0, rai_bps=400e3, rhai_bps=500e3, min_rate_bps=10e3)
    none_us = hooks_cost_us(n, NoCongestionControl(10e6, 1024))
    dcqcn_us = hooks_cost_us(n, Dcqcn(10e6, 1024, s, now_ns=0))
    print(f"sender hooks: none {none_us:.2f} us/pkt, dcqcn {dcqcn_us:.2f} us/pkt")


if __name__ == "__main__":
    main()
