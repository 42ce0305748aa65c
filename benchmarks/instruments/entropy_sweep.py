"""One UDP datagram per source port, from this host to a peer: how do select groups split flows?

Each source port is its own flow to an ECMP hash, so sending one datagram from
each of N ports and counting the packets on each uplink measures the share of
flows each bucket gets (``load_balance``). Destination port 4791 (RoCEv2), so
the 5-tuple is that of a RoCEv2 QP; the payload is not a RoCE packet and the
peer's agent (if any) drops it as unknown.

Run inside a host namespace::

    python -m benchmarks.instruments.entropy_sweep --run-id RID --ip 10.0.1.1 --peer 10.0.2.1 --sports 49152-51151

Prints one JSON line ``{"sent_pkts": N}``. Paced (``--gap-us``) so the host's
NIC queue never overflows: every datagram leaves the host.
"""
from __future__ import annotations

import argparse
import json
import socket
import time

from benchmarks.instruments.flows import parse_ports
from traffic.wire import ROCEV2_UDP_PORT


def sweep(ip: str, peer: str, sports: list[int], payload_bytes: int = 64, gap_us: float = 300.0) -> int:
    """Send one ``payload_bytes`` datagram from each port of ``sports`` (bound on ``ip``) to ``peer``:4791.

    Returns the datagrams sent. Raises OSError when a port cannot be bound (in use).
    """
    payload = bytes(payload_bytes)
    for sport in sports:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((ip, sport))
            s.sendto(payload, (peer, ROCEV2_UDP_PORT))
        time.sleep(gap_us / 1e6)
    return len(sports)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.instruments.entropy_sweep",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True, help="run id (lets cleanup find this process)")
    ap.add_argument("--ip", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--sports", required=True, help="e.g. 49152-51151")
    ap.add_argument("--payload-bytes", type=int, default=64)
    ap.add_argument("--gap-us", type=float, default=300.0)
    a = ap.parse_args(argv)
    print(json.dumps({"sent_pkts": sweep(a.ip, a.peer, parse_ports(a.sports), a.payload_bytes, a.gap_us)}),
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
