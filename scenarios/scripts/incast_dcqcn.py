#!/usr/bin/env python3
"""A 4:1 incast with ECN marking and PFC, without and with DCQCN: queue depth, marks, CNPs and pauses.

Run as root from the repository:  .venv/bin/python scenarios/scripts/incast_dcqcn.py [--quick]

scenarios/incast_both.yaml (four senders on other leaves, one receiver; RED-curve ECN marking of the
lossless class and hop-by-hop PFC) with ``transport.congestion_control`` none and dcqcn. Without a
congestion control the packets are not ECN-capable (nothing is marked) and the receiver's queue climbs
to Xoff again and again: PFC pauses the senders all along. With DCQCN the marked packets bring CNPs,
the senders slow down, the queue stays near Kmax, below Xoff, and PFC pauses mostly in the first
round trips. ``--quick``: 1 MiB per sender.
"""
from __future__ import annotations

import sys

from testbed import Scenario, sweep, script_args


def main(argv=None) -> dict:
    """Run both; return {"none": RunResult, "dcqcn": RunResult}."""
    args = script_args(__doc__, "1 MiB per sender (about 30 s)", argv)
    base = Scenario.from_yaml("incast_both")
    if args.quick:
        base = base.with_({"workload.pattern.size_bytes": "1MiB"})
    results = dict(sweep(base, "transport.congestion_control", ["none", "dcqcn"], results=args.results))
    print(f"{'cc':>6} {'verdict':>13} {'queue p99(B)':>12} {'CE pkts':>8} {'CNPs':>6} {'pauses':>6} "
          f"{'paused(s)':>9} {'fct max(ms)':>11}")
    for label, r in results.items():
        q, qps, pfc = r.lossless_queues, r.qps, r.pfc_ports
        print(f"{label:>6} {r.verdict:>13} {q.backlog_bytes.quantile(0.99):>12.0f} {qps.ce_pkts.sum():>8.0f} "
              f"{qps.cnps_tx.sum():>6.0f} {pfc.pauses_sent.sum():>6} {pfc.paused_time_s.sum():>9.3f} "
              f"{r.fct.fct_us.max() / 1e3:>11.1f}")
    return results


if __name__ == "__main__":
    sys.exit(max(r.exit_code for r in main().values()))
