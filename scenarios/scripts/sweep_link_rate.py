#!/usr/bin/env python3
"""Sweep the link rate of a small ring all-reduce and print busbw per rate and size.

Run as root from the repository:  .venv/bin/python scenarios/scripts/sweep_link_rate.py [--quick]

The quickstart's fabric and all-reduce (testbed.api: Scenario, sweep), with every link (host and fabric) at
each rate in turn. With time dilation busbw scales with the link rate while busbw/link (busbw over the
link's goodput) stays near 1: the emulation is faithful at each rate. ``--quick``: 4 hosts, 2 rates, 2 sizes.
"""
from __future__ import annotations

import sys

from testbed import Scenario, sweep, script_args


def main(argv=None) -> dict:
    """Run the sweep; return {rate: RunResult}."""
    args = script_args(__doc__, "4 hosts, rates 5M and 10M, 128-256 KiB (about 25 s)", argv)
    base = Scenario.from_yaml("quickstart").with_({"workload.sizes.max_bytes": "1MiB"})
    rates = ["5M", "10M", "15M"]
    if args.quick:
        base = base.with_({"fabric.spines": 1, "fabric.leaves": 2, "workload.iterations": 2,
                           "workload.sizes": {"min_bytes": "128KiB", "max_bytes": "256KiB", "factor": 2}})
        rates = ["5M", "10M"]
    results = {}
    for rate, r in sweep(base, ("fabric.host_link_bps", "fabric.fabric_link_bps"), rates,
                         results=args.results):
        results[rate] = r
        print(f"--- {rate}bit/s links: {r.verdict} ({r.run_dir})")
    print(f"{'rate':>6} {'size_bytes':>10} {'busbw(Mb/s)':>11} {'busbw/link':>10}")
    for rate, r in results.items():
        for row in r.sizes.itertuples():
            print(f"{rate:>6} {row.size_bytes:>10} {row.busbw_bps / 1e6:>11.3f} {row.busbw_ratio:>10.3f}")
    return results


if __name__ == "__main__":
    sys.exit(max(r.exit_code for r in main().values()))
