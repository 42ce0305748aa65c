"""The security probes' two ends, run inside a host's network namespace (testbed.tenants.security_probes).

``count``: on interface ``--ifname``, an AF_PACKET socket counts every frame whose bytes hold
:data:`MARK` + a probe id, per id; prints ``ready``, counts until stdin closes (or ``--max-s``), then
prints one JSON line ``{"delivered": {"<id>": frames}}``.

``attack``: the probes of one attacker, read as a JSON list from ``--probes`` (each
``{"id", "kind", "count", "dst_ip", "dst_mac", "src_ip", "src_mac"}``), sent with scapy on ``--ifname``:

* ``arp``: ``count`` broadcast ARP who-has ``dst_ip``; answered: the ARP replies for ``dst_ip``;
* ``ping``: ``count`` ICMP echo requests to ``dst_ip``, addressed straight to ``dst_mac`` (an attacker
  who learned the MAC elsewhere); answered: the echo replies;
* ``roce``: ``count`` RoCEv2 packets (UDP 4791, a BTH RC SEND_ONLY to queue pair ``qpn``) to ``dst_ip``
  at ``dst_mac``; answered: any frame back from ``dst_ip`` (an ACK or NAK);
* ``spoof``: ``count`` UDP frames whose Ethernet and IPv4 sources are another host's (``src_mac``,
  ``src_ip``), to ``dst_ip`` at ``dst_mac``; answered: 0 (a reply would go to the spoofed host).

Every packet carries :data:`MARK` + the probe id, so the ``count`` end at the destination counts what
was delivered. Prints ``{"<id>": {"sent": n, "answered": n}}``.
"""
from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import time

#: marker in every probe packet's payload, followed by the probe id (ASCII)
MARK = b"TB-SEC-PROBE:"
ETH_P_ALL = 0x0003
#: how long the attacker waits for answers after each probe's packets, s
ANSWER_WAIT_S = 0.4


def _count(a: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((a.ifname, ETH_P_ALL))
    print("ready", flush=True)
    counts: dict[str, int] = {}

    def take() -> None:
        frame, addr = s.recvfrom(65535)
        if addr[2] == socket.PACKET_OUTGOING:
            return
        i = frame.find(MARK)
        if i >= 0:
            key = frame[i + len(MARK):].split(b"\0")[0].decode("ascii", "replace")
            counts[key] = counts.get(key, 0) + 1

    deadline = time.monotonic() + a.max_s
    while time.monotonic() < deadline:
        ready = select.select([s, sys.stdin], [], [], max(0.0, deadline - time.monotonic()))[0]
        if s in ready:
            take()
        if sys.stdin in ready and not sys.stdin.readline():  # stdin closed: the attackers are done
            while select.select([s], [], [], 0)[0]:
                take()
            break
    return {"delivered": counts}


def _attack(a: argparse.Namespace) -> dict:
    from scapy.all import ARP, ICMP, IP, UDP, AsyncSniffer, Ether, Raw, conf, sendp  # scapy loads slowly: here only
    from scapy.contrib.roce import BTH

    conf.verb = 0
    own_mac = open(f"/sys/class/net/{a.ifname}/address").read().strip()
    out = {}
    for p in json.loads(a.probes):
        payload = Raw(MARK + p["id"].encode() + b"\0")
        kind, n = p["kind"], p["count"]
        if kind == "arp":
            pkts = [Ether(src=own_mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=own_mac, psrc=a.src_ip,
                                                                       pdst=p["dst_ip"]) for _ in range(n)]
            match = lambda r, p=p: ARP in r and r[ARP].op == 2 and r[ARP].psrc == p["dst_ip"]  # noqa: E731
        elif kind == "ping":
            pkts = [Ether(src=own_mac, dst=p["dst_mac"]) / IP(src=a.src_ip, dst=p["dst_ip"]) /
                    ICMP(id=0x7462, seq=i) / payload for i in range(n)]
            match = lambda r, p=p: ICMP in r and r[ICMP].type == 0 and r[IP].src == p["dst_ip"]  # noqa: E731
        elif kind == "roce":
            pkts = [Ether(src=own_mac, dst=p["dst_mac"]) / IP(src=a.src_ip, dst=p["dst_ip"]) /
                    UDP(sport=49152 + i, dport=4791) / BTH(opcode=4, dqpn=p["qpn"], psn=i, ackreq=1) / payload
                    for i in range(n)]
            match = lambda r, p=p: IP in r and r[IP].src == p["dst_ip"]  # noqa: E731
        elif kind == "spoof":
            pkts = [Ether(src=p["src_mac"], dst=p["dst_mac"]) / IP(src=p["src_ip"], dst=p["dst_ip"]) /
                    UDP(sport=9998, dport=9999) / payload for _ in range(n)]
            match = lambda r: False  # noqa: E731
        else:
            raise SystemExit(f"unknown probe kind {kind!r}: allowed arp, ping, roce, spoof")
        sniffer = AsyncSniffer(iface=a.ifname, store=True, lfilter=lambda r: r.src != own_mac and match(r))
        sniffer.start()
        time.sleep(0.1)  # the sniffer's socket is open
        sendp(pkts, iface=a.ifname, inter=0.005)
        time.sleep(ANSWER_WAIT_S)
        answered = len(sniffer.stop() or [])
        out[p["id"]] = {"sent": len(pkts), "answered": answered}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="security_agent", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("count")
    c.add_argument("--ifname", required=True)
    c.add_argument("--max-s", type=float, default=30.0)
    t = sub.add_parser("attack")
    for k in ("ifname", "src-ip", "probes"):
        t.add_argument(f"--{k}", required=True)
    a = p.parse_args(argv)
    print(json.dumps(_count(a) if a.mode == "count" else _attack(a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
