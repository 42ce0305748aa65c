#!/usr/bin/env python3
"""ECMP against packet spraying on k long flows over k equal paths: flow completion times and uplink balance.

Run as root from the repository:  .venv/bin/python scenarios/scripts/ecmp_vs_spray.py [--quick]

scenarios/lb_flows_ecmp.yaml (4 flows leaf 1 -> leaf 2 over 4 spines, one UDP source port per flow) and the
same with ``transport.entropy: spray`` (64 source ports per QP, one per packet at random). ECMP hashes
flows into the same spine now and then (balls into bins), so some flows share a path and take longer;
spraying spreads every flow over every spine. ``--quick``: 3 trials of 512 KiB flows.
"""
from __future__ import annotations

import sys

from testbed import Scenario, run, script_args


def main(argv=None) -> dict:
    """Run both; return {"ecmp": RunResult, "spray": RunResult}."""
    args = script_args(__doc__, "3 trials of 512 KiB flows (about 30 s)", argv)
    ecmp = Scenario.from_yaml("lb_flows_ecmp")
    if args.quick:
        ecmp = ecmp.with_({"workload.pattern.trials": 3, "workload.pattern.size_bytes": "512KiB"})
    spray = ecmp.with_({"transport.entropy": "spray", "transport.entropy_ports": 64, "name": "lb_flows_spray"})
    results = {"ecmp": run(ecmp, results=args.results), "spray": run(spray, results=args.results)}
    print(f"{'policy':>6} {'verdict':>13} {'fct p50(ms)':>11} {'fct max(ms)':>11} {'slowdown mean':>13} "
          f"{'uplink share min':>16} {'max':>6}")
    for label, r in results.items():
        fct, up = r.fct, r.uplinks
        print(f"{label:>6} {r.verdict:>13} {fct.fct_us.median() / 1e3:>11.1f} {fct.fct_us.max() / 1e3:>11.1f} "
              f"{fct.slowdown.mean():>13.2f} {up.share.min():>16.3f} {up.share.max():>6.3f}")
    return results


if __name__ == "__main__":
    sys.exit(max(r.exit_code for r in main().values()))
