"""Highest faithful link rate at RoCE path MTU 1024 and 4096 on this machine.

Runs the quickstart fabric (2 spines, 4 leaves, 8 hosts, ring all-reduce) with
``testbed run`` at rising link rates (host and fabric links alike), once with
path MTU 1024 on 1500-byte links and once with path MTU 4096 on 4200-byte
links, and prints for each point busbw/link, the fidelity verdict and its
first violation, then for each MTU the highest rate whose run was faithful and
every lower rate's too (a faithful point above an unfaithful one is shown, not counted);
a point also needs busbw/link >= 0.95: the ring on this fabric meets no contention, so a lower
busbw can only come from the emulation, even where the verdict could not judge the hosts.
The CPU cost of emulation is per packet, so 4 KB packets should let the same
CPU emulate several times the bandwidth of 1 KB ones (docs/architecture.md: a plain UDP
ring reached 80 Mbit/s per host with 4 KB datagrams against 30 with 1 KB).

Each point is short: one message size that lasts about ``--op-s`` seconds at
that rate (so every rate moves the same number of packet times), one warm-up
and ``--iterations`` timed operations. A rate sweep for one MTU stops after two
unfaithful rates in a row. Needs root; run it under the fabric lock::

    flock /tmp/fabric.lock .venv/bin/python benchmarks/mtu_capacity.py

Usage: ``python benchmarks/mtu_capacity.py [--rates 10,20,40,80,160] [--mtus 1024,4096]
[--iterations 2] [--op-s 0.8]``
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from traffic import collectives
from testbed.measure.link_model import data_frame_bytes
from testbed.results.rundir import RunDir

LINK_MTU_FOR = {1024: 1500, 2048: 2100, 4096: 4200}
#: a point counts as faithful only with the verdict faithful AND busbw/link at least this (see main)
MIN_BUSBW_RATIO = 0.95
N_RANKS = 8

SCENARIO = """
name: mtu{payload}-{rate_m}M
fabric: {{spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: {rate_m}M, fabric_link_bps: {rate_m}M,
          buffer_bytes: 100KB, mtu_bytes: {mtu}}}
transport: {{payload_bytes: {payload}, window_pkts: {window}, ack_every_pkts: 8}}
workload: {{sizes: {{min_bytes: {size}, max_bytes: {size}}}, iterations: {iterations}, warmup_iterations: 1}}
"""


def size_for(rate_bps: float, payload: int, op_s: float) -> int:
    """Message size whose ring all-reduce on 8 ranks takes about ``op_s`` at ``rate_bps`` (whole packets)."""
    goodput = rate_bps * payload / data_frame_bytes(payload)
    size = op_s * goodput / 8 / collectives.busbw_factor("allreduce", "ring", N_RANKS)
    return max(payload * N_RANKS, int(size) // (payload * N_RANKS) * payload * N_RANKS)


def run_point(payload: int, rate_m: int, iterations: int, op_s: float, workdir: Path) -> dict:
    """One ``testbed run``; returns summary figures (or the error)."""
    size = size_for(rate_m * 1e6, payload, op_s)
    # a window of ~64 KiB in flight per QP at every MTU, as the quickstart's 64 x 1 KiB
    window = max(8, 64 * 1024 // payload)
    text = SCENARIO.format(payload=payload, rate_m=rate_m, mtu=LINK_MTU_FOR[payload], size=size,
                           iterations=iterations, window=window)
    scen = workdir / f"mtu{payload}-{rate_m}M.yaml"
    scen.write_text(text)
    out = workdir / f"res-{payload}-{rate_m}"
    # --over-capacity: the sweep steps past what the machine emulates on purpose (the run judges each point)
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scen), "--results", str(out), "--quiet",
                           "--over-capacity"], capture_output=True, text=True, timeout=600)
    found = list(out.glob("*/summary.json"))
    if not found:
        return {"payload": payload, "rate_m": rate_m, "size": size, "error": (proc.stderr or proc.stdout)[-300:]}
    s = RunDir.open(found[0].parent).summary
    cpu = s["fidelity"].get("cpu", {})
    timing = s["fidelity"].get("packet_timing", {})
    return {"payload": payload, "rate_m": rate_m, "size": size, "faithful": s["faithful"],
            "busbw_ratio": s["sizes"][0]["busbw_ratio"] if s["sizes"] else float("nan"),
            "mean_idle_pct": cpu.get("mean_idle_pct", float("nan")),
            "timing": timing.get("status", "?"),
            "violation": s["violations"][0] if s["violations"] else ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,20,40,80,160", help="link rates in Mbit/s, rising")
    ap.add_argument("--mtus", default="1024,4096", help="RoCE path MTUs (payload bytes)")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--op-s", type=float, default=0.8, help="seconds one operation takes at each rate")
    args = ap.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    mtus = [int(m) for m in args.mtus.split(",")]
    best: dict[int, int | None] = {}
    print(f"{'path MTU':>8} {'rate':>9} {'size':>9} {'busbw/link':>10} {'idle%':>6} {'timing':>10} faithful")
    with tempfile.TemporaryDirectory(prefix="mtu_capacity-") as tmp:
        for payload in mtus:
            best[payload] = None
            misses, misses_seen = 0, False
            for rate_m in rates:
                r = run_point(payload, rate_m, args.iterations, args.op_s, Path(tmp))
                if "error" in r:
                    print(f"{payload:>8} {rate_m:>5} Mb/s {r['size']:>9} run failed: {r['error']!r}")
                    ok = False
                else:
                    # the ring on this fabric is contention-free (one cross-leaf flow per leaf uplink and
                    # downlink), so busbw/link below MIN_BUSBW_RATIO can only come from the emulation, even
                    # when the verdict's host and timing checks could not judge the run
                    ok = r["faithful"] and r["busbw_ratio"] >= MIN_BUSBW_RATIO
                    print(f"{payload:>8} {rate_m:>5} Mb/s {r['size']:>9} {r['busbw_ratio']:>10.3f} "
                          f"{r['mean_idle_pct']:>6.1f} {r['timing']:>10} {'yes' if ok else 'no: ' + (r['violation'][:110] or f'busbw/link below {MIN_BUSBW_RATIO}')}",
                          flush=True)
                if ok:
                    if not misses_seen:  # a rate counts only when every lower rate was faithful too
                        best[payload] = rate_m
                    misses = 0
                else:
                    misses_seen = True
                    misses += 1
                    if misses >= 2:
                        break
    print()
    for payload, rate_m in best.items():
        shown = f"{rate_m} Mbit/s per link ({rate_m * 8} Mbit/s over 8 hosts)" if rate_m else "none of the rates"
        print(f"highest faithful rate at path MTU {payload}: {shown}")
    if all(best.get(m) for m in (1024, 4096)):
        print(f"path MTU 4096 emulates {best[4096] / best[1024]:.1f}x the bandwidth of path MTU 1024 on this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
