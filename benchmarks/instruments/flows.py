"""Point-to-point RoCEv2 flows between two hosts: one message per QP, chosen UDP source ports.

The pipeline-parallel pattern (send/recv between two stages) and the tool for
ECMP entropy experiments: N queue pairs from host A to host B, each sending one
message of ``size_bytes`` from its own (or a shared) UDP source port.

Run inside a host namespace::

    python -m benchmarks.instruments.flows --run-id RID recv --ip 10.0.2.1 --peer 10.0.1.1 --flows 64 --size-bytes 262144
    python -m benchmarks.instruments.flows --run-id RID send --ip 10.0.1.1 --peer 10.0.2.1 --sports 49152-49215 --size-bytes 262144

Both print one JSON line ``{"event": "ready"}`` when their QPs are up and one
JSON line with per-flow counters when done (the receiver when every flow
delivered ``size_bytes``). QP numbers: requester 0x30000+i, responder 0x40000+i.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict

from traffic.clock import unix_ns
from traffic.transport import Endpoint, TransportParams
from traffic.transport.entropy import entropy_policy
from traffic.transport.selective import GO_BACK_N, SELECTIVE_REPEAT, qp_classes

REQ_QPN_BASE = 0x30000
RESP_QPN_BASE = 0x40000


def parse_ports(text: str) -> list[int]:
    """``"49152-49215"`` -> [49152..49215]; ``"4000x64"`` -> 64 times 4000; ``"1,2,3"`` -> list."""
    try:
        if "x" in text:
            port, count = text.split("x")
            ports = [int(port)] * int(count)
        elif "-" in text:
            lo, hi = (int(v) for v in text.split("-"))
            ports = list(range(lo, hi + 1))
        else:
            ports = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--sports {text!r}: allowed 'LO-HI', 'PORTxCOUNT' or 'P1,P2,...'") from None
    bad = [p for p in ports if not 1 <= p <= 65535]
    if not ports or bad:
        raise ValueError(f"--sports {text!r}: ports must be 1-65535, got {bad or 'none'}")
    return ports


def send(ip: str, peer: str, sports: list[int], size_bytes: int, params: TransportParams,
         timeout_s: float) -> dict:
    ep = Endpoint(ip)
    qps = []
    requester_qp, _ = qp_classes(params.loss_recovery)
    policy = entropy_policy(params.entropy, 1, 0, params.entropy_ports, params.flowlet_gap_us)
    for i, sport in enumerate(sports):
        qp = requester_qp(REQ_QPN_BASE + i, RESP_QPN_BASE + i, ip, peer, sport, params,
                          entropy=policy.for_qp(sport))
        ep.requesters[qp.qpn] = qp
        qps.append(qp)
    ep.start()
    print(json.dumps({"event": "ready"}), flush=True)
    sys.stdin.readline()  # the test says go once the receiver is ready
    t0 = unix_ns()
    for qp in qps:
        qp.post_send(size_bytes)
    ok = all(qp.wait_acked(0, max(0.0, timeout_s - (unix_ns() - t0) / 1e9)) for qp in qps)
    out = {"event": "done", "ok": ok, "t_start_ns": t0, "t_end_ns": unix_ns(),
           "flows": [{"sport": s, **asdict(qp.counters)} for s, qp in zip(sports, qps)]}
    ep.stop()
    return out


def recv(ip: str, peer: str, flows: int, size_bytes: int, params: TransportParams, timeout_s: float) -> dict:
    ep = Endpoint(ip)
    qps = []
    _, responder_qp = qp_classes(params.loss_recovery)
    for i in range(flows):
        qp = responder_qp(RESP_QPN_BASE + i, REQ_QPN_BASE + i, ip, peer, 0, params)
        ep.responders[qp.qpn] = qp
        qps.append(qp)
    ep.start()
    print(json.dumps({"event": "ready"}), flush=True)
    deadline = time.monotonic() + timeout_s
    ok = all(qp.wait_messages(1, max(0.0, deadline - time.monotonic())) for qp in qps)
    out = {"event": "done", "ok": ok, "flows": [asdict(qp.counters) for qp in qps]}
    ep.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="point-to-point RoCEv2 flows")
    ap.add_argument("--run-id", required=True, help="run id (lets cleanup find this process)")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--payload-bytes", type=int, default=1024)
    ap.add_argument("--window-pkts", type=int, default=64)
    ap.add_argument("--entropy", default="per_flow",
                    help="per_flow, spray (selective repeat on both ends) or flowlet")
    ap.add_argument("--entropy-ports", type=int, default=128, help="ports per QP with spray or flowlet")
    ap.add_argument("--flowlet-gap-us", type=int, default=500, help="idle gap that starts a flowlet")
    ap.add_argument("--rto-us", type=int, default=200_000)
    sub = ap.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send")
    s.add_argument("--sports", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--flows", type=int, required=True)
    for p in (s, r):
        p.add_argument("--ip", required=True)
        p.add_argument("--peer", required=True)
        p.add_argument("--size-bytes", type=int, required=True)
    args = ap.parse_args(argv)
    spray = args.entropy == "spray"
    params = TransportParams(payload_bytes=args.payload_bytes, window_pkts=args.window_pkts, rto_us=args.rto_us,
                             entropy=args.entropy, entropy_ports=1 if args.entropy == "per_flow" else args.entropy_ports,
                             flowlet_gap_us=args.flowlet_gap_us if args.entropy == "flowlet" else 0,
                             loss_recovery=SELECTIVE_REPEAT if spray else GO_BACK_N,
                             reorder_window_us=args.rto_us // 2 if spray else 0)
    if args.role == "send":
        out = send(args.ip, args.peer, parse_ports(args.sports), args.size_bytes, params, args.timeout_s)
    else:
        out = recv(args.ip, args.peer, args.flows, args.size_bytes, params, args.timeout_s)
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
