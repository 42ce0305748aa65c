"""Per-host traffic agent: runs in a host's network namespace, driven over stdin/stdout.

Started by the testbed as ``python -m traffic.agent --run-id RID --config FILE``.
The config (JSON) names this host's rank and address, every rank's address,
the peers it needs queue pairs with, and the transport parameters.

Protocol, one JSON object per line:

- agent -> testbed: ``{"event": "ready"}`` once its QPs are up;
  ``{"event": "op_done", "op_id", "t_start_ns", "t_end_ns", ...}`` after each
  collective; ``{"event": "stats", ...}`` on request; ``{"event": "error",
  "error": "..."}`` on failure.
- testbed -> agent: ``{"cmd": "op", "op_id", "collective": "allreduce",
  "algorithm": "ring", "size_bytes", "groups", "timeout_s"}``; ``{"cmd":
  "stats"}``; ``{"cmd": "exit"}``. ``groups`` lists the rank groups that run
  the op concurrently, each in group order (absent: one group of all ranks); the
  agent runs the group holding its rank, and records an idle op (no bytes)
  when no group holds it.

QP numbers: the requester QP at rank r towards rank q is 0x10000+q, the
responder QP at rank q for requester r is 0x20000+r; each QP binds its own
UDP source port, drawn without repeats from 49152-65535 by a generator seeded
with (seed, rank): the QP's ECMP entropy. The QP from rank r to rank q starts
at the initial PSN ``initial_psn(seed, r, q)`` (24-bit, seeded random, as RNICs
pick one), which both ends compute.

Times in records (``t_start_ns``, ``t_end_ns``, ``t_post_ns``, ...) are
Unix-epoch ns from :func:`traffic.clock.unix_ns`, the clock of every table.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import traceback
from dataclasses import asdict

from traffic import collectives
from traffic.clock import unix_ns
from traffic.transport import Endpoint, RequesterQP, ResponderQP, TransportParams, initial_psn

REQ_QPN_BASE = 0x10000
RESP_QPN_BASE = 0x20000


_EMIT_LOCK = threading.Lock()


def _emit(obj: dict) -> None:
    line = json.dumps(obj) + "\n"
    with _EMIT_LOCK:  # QP threads report send errors while the main thread reports ops
        sys.stdout.write(line)
        sys.stdout.flush()


def _send_failed(rank: int, text: str) -> None:
    """A QP hit a send error other than a full queue: tell the testbed now (it stops the run)."""
    _emit({"event": "error", "error": f"rank {rank}: {text}"})


def entropy_ports(seed: int, rank: int, count: int) -> list[int]:
    """``count`` distinct UDP source ports in 49152-65535 for this rank's QPs."""
    return random.Random(f"{seed}-{rank}").sample(range(49152, 65536), count)


class Agent:
    def __init__(self, cfg: dict):
        self.rank = cfg["rank"]
        self.ips = {r["rank"]: r["ip"] for r in cfg["ranks"]}
        self.n = len(self.ips)
        self.params = TransportParams(**cfg["transport"])
        my_ip = self.ips[self.rank]
        peers = sorted(set(cfg["peers"]))
        ports = entropy_ports(cfg["seed"], self.rank, 2 * len(peers))
        self.ep = Endpoint(my_ip)
        self.send_qp: dict[int, RequesterQP] = {}
        #: messages from each peer that finished operations consumed (see traffic.collectives.executor)
        self.rx_consumed: dict[int, int] = {q: 0 for q in cfg["peers"]}
        self.recv_qp: dict[int, ResponderQP] = {}
        for i, q in enumerate(peers):
            on_error = lambda text, r=self.rank: _send_failed(r, text)  # noqa: E731
            req = RequesterQP(REQ_QPN_BASE + q, RESP_QPN_BASE + self.rank, my_ip, self.ips[q],
                              ports[2 * i], self.params, first_psn=initial_psn(cfg["seed"], self.rank, q),
                              on_error=on_error)
            resp = ResponderQP(RESP_QPN_BASE + q, REQ_QPN_BASE + self.rank, my_ip, self.ips[q],
                               ports[2 * i + 1], self.params, first_psn=initial_psn(cfg["seed"], q, self.rank),
                               on_error=on_error)
            self.send_qp[q], self.recv_qp[q] = req, resp
            self.ep.requesters[req.qpn] = req
            self.ep.responders[resp.qpn] = resp
        self.ep.start()

    def run_op(self, cmd: dict) -> dict:
        alg = collectives.get(cmd.get("collective", collectives.DEFAULT_COLLECTIVE),
                              cmd.get("algorithm", collectives.DEFAULT_ALGORITHM))
        groups = cmd.get("groups") or [sorted(self.ips)]
        mine = [g for g in groups if self.rank in g]
        if len(mine) > 1 or (mine and len(set(mine[0])) != len(mine[0])):
            raise ValueError(f"rank {self.rank} appears more than once in the groups of op {cmd['op_id']}")
        t0 = unix_ns()
        if not mine:  # not in this op: idle
            return {"event": "op_done", "op_id": cmd["op_id"], "rank": self.rank, "group_index": None,
                    "group_size": 0, "t_start_ns": t0, "t_end_ns": t0, "sent_bytes": 0, "rx_msgs": 0,
                    "t_rx_done_ns": t0}
        group = mine[0]
        g, pos = len(group), group.index(self.rank)
        res = collectives.execute(alg, pos, group, int(cmd["size_bytes"]), self.send_qp, self.recv_qp,
                                  self.rx_consumed, float(cmd.get("timeout_s", 60)))
        t1 = unix_ns()
        return {"event": "op_done", "op_id": cmd["op_id"], "rank": self.rank,
                "group_index": groups.index(group), "group_size": g, "t_start_ns": t0, "t_end_ns": t1, **res}

    def stats(self) -> dict:
        qps = []
        for q, qp in self.send_qp.items():
            qps.append({"rank": self.rank, "peer": q, "role": "requester", "qpn": qp.qpn,
                        "udp_sport": qp.sock.getsockname()[1], "first_psn": qp.first_psn, **asdict(qp.counters)})
        for q, qp in self.recv_qp.items():
            qps.append({"rank": self.rank, "peer": q, "role": "responder", "qpn": qp.qpn,
                        "first_psn": qp.first_psn, **asdict(qp.counters)})
        msgs = []
        for q, qp in self.send_qp.items():
            for m in qp.messages:
                msgs.append({"rank": self.rank, "peer": q, "msg_seq": m.seq, "size_bytes": m.size_bytes,
                             "t_post_ns": m.t_post_ns, "t_acked_ns": m.t_acked_ns})
        return {"event": "stats", "rank": self.rank, "qps": qps, "msgs": msgs,
                "rx_pkts": self.ep.rx_pkts, "rx_unknown_pkts": self.ep.rx_unknown_pkts}

    def close(self) -> None:
        self.ep.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True, help="run id (lets cleanup find this process)")
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    with open(args.config) as f:
        cfg = json.load(f)
    try:
        agent = Agent(cfg)
    except Exception as e:
        _emit({"event": "error", "error": f"agent start failed: {e}", "trace": traceback.format_exc()})
        return 1
    _emit({"event": "ready", "rank": agent.rank})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "exit":
                break
            try:
                if cmd["cmd"] == "op":
                    _emit(agent.run_op(cmd))
                elif cmd["cmd"] == "stats":
                    _emit(agent.stats())
                else:
                    raise ValueError(f"unknown cmd {cmd['cmd']!r}: allowed op, stats, exit")
            except Exception as e:
                _emit({"event": "error", "op_id": cmd.get("op_id"), "error": str(e)})
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
