"""The isolation probe's two ends, run inside a host's network namespace (stdlib only, starts fast).

``rx``: bind UDP ``--port`` on every address, print ``ready``, count the probe datagrams (payload
:data:`MAGIC` + probe id) per probe id until stdin closes (or ``--max-s``), then print one JSON line
``{"received": {"<id>": packets}}``.

``tx``: on interface ``--ifname``, first ask ARP for ``--dst-ip`` (one broadcast request; did any
reply come within ``--arp-wait-s``?), then send ``--count`` IPv4/UDP frames, ``--interval-s`` apart,
straight to ``--dst-mac`` from an AF_PACKET socket: the probe does not need the fabric's ARP
answer, so a blocked probe is stopped by the switch's drop flow (counted there), not by a missing
neighbour entry. Prints ``{"sent": packets, "arp_replied": bool}``.

The receiver counts at the destination itself: a delivered packet is counted even when no reply
could return (the controller answers ARP only within a tenant, so a reply-counting probe such as
ping would read a delivered cross-tenant packet as blocked).

Frame layout: Ethernet II (RFC 894), IPv4 (RFC 791: 20-byte header, DF, TTL 64, header checksum
RFC 1071), UDP (RFC 768: checksum 0, "no checksum", allowed over IPv4), ARP (RFC 826).
"""
from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import sys
import time

#: payload prefix of a probe datagram; the probe id (ASCII) follows
MAGIC = b"TB-TENANT-PROBE:"
ETH_P_ARP, ETH_P_IP, ETH_P_ALL = 0x0806, 0x0800, 0x0003
PROBE_SRC_PORT = 9998


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def ipv4_checksum(header: bytes) -> int:
    """The RFC 1071 one's-complement sum of 16-bit words (checksum field zero in ``header``)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, dst_port: int, payload: bytes,
              ident: int = 0) -> bytes:
    """One Ethernet/IPv4/UDP frame (bytes), UDP checksum 0."""
    udp = struct.pack("!HHHH", PROBE_SRC_PORT, dst_port, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), ident & 0xFFFF, 0x4000, 64, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    hdr = hdr[:10] + struct.pack("!H", ipv4_checksum(hdr)) + hdr[12:]
    return _mac(dst_mac) + _mac(src_mac) + struct.pack("!H", ETH_P_IP) + hdr + udp


def arp_request(src_mac: str, src_ip: str, dst_ip: str) -> bytes:
    """A broadcast ARP who-has ``dst_ip`` tell ``src_ip`` frame."""
    body = struct.pack("!HHBBH6s4s6s4s", 1, ETH_P_IP, 6, 4, 1, _mac(src_mac), socket.inet_aton(src_ip),
                       b"\x00" * 6, socket.inet_aton(dst_ip))
    return b"\xff" * 6 + _mac(src_mac) + struct.pack("!H", ETH_P_ARP) + body


def is_arp_reply_for(frame: bytes, ip: str) -> bool:
    """True when ``frame`` is an ARP reply whose sender protocol address is ``ip``."""
    if len(frame) < 42 or struct.unpack("!H", frame[12:14])[0] != ETH_P_ARP:
        return False
    op = struct.unpack("!H", frame[20:22])[0]
    return op == 2 and frame[28:32] == socket.inet_aton(ip)


def _tx(a: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    s.bind((a.ifname, ETH_P_ARP))
    s.send(arp_request(a.src_mac, a.src_ip, a.dst_ip))
    replied, deadline = False, time.monotonic() + a.arp_wait_s
    while not replied:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            break
        replied = is_arp_reply_for(s.recv(2048), a.dst_ip)
    payload = MAGIC + a.id.encode()
    sent = 0
    for i in range(a.count):
        s.send(udp_frame(a.src_mac, a.dst_mac, a.src_ip, a.dst_ip, a.port, payload, ident=i))
        sent += 1
        time.sleep(a.interval_s)
    s.close()
    return {"sent": sent, "arp_replied": replied}


def _rx(a: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", a.port))
    print("ready", flush=True)
    counts: dict[str, int] = {}
    deadline = time.monotonic() + a.max_s
    while time.monotonic() < deadline:
        ready = select.select([s, sys.stdin], [], [], max(0.0, deadline - time.monotonic()))[0]
        if s in ready:
            data = s.recv(2048)
            if data.startswith(MAGIC):
                key = data[len(MAGIC):].decode("ascii", "replace")
                counts[key] = counts.get(key, 0) + 1
        if sys.stdin in ready and not sys.stdin.readline():  # stdin closed: the senders are done
            while select.select([s], [], [], 0)[0]:  # what already arrived
                data = s.recv(2048)
                if data.startswith(MAGIC):
                    key = data[len(MAGIC):].decode("ascii", "replace")
                    counts[key] = counts.get(key, 0) + 1
            break
    return {"received": counts}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="probe_agent", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    rx = sub.add_parser("rx")
    rx.add_argument("--port", type=int, required=True)
    rx.add_argument("--max-s", type=float, default=30.0)
    tx = sub.add_parser("tx")
    for k in ("ifname", "src-mac", "src-ip", "dst-mac", "dst-ip", "id"):
        tx.add_argument(f"--{k}", required=True)
    tx.add_argument("--port", type=int, required=True)
    tx.add_argument("--count", type=int, default=20)
    tx.add_argument("--interval-s", type=float, default=0.005)
    tx.add_argument("--arp-wait-s", type=float, default=0.5)
    a = p.parse_args(argv)
    print(json.dumps(_tx(a) if a.mode == "tx" else _rx(a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
