"""FCT slowdown by flow size under open-loop WebSearch traffic: ECMP against spraying at 30 % and 60 % load.

Issue 32's acceptance figure. Each point is one ``testbed run`` of ``workload.open_loop`` (docs/open-loop.md)
on 4 hosts, 2 leaves and 2 spines at 10 Mbit/s (non-blocking): ``--flows`` flows of the WebSearch
distribution (DCTCP, SIGCOMM 2010; HPCC's file) x ``size_scale`` 0.01, Poisson arrivals at the load, the
same seed and so the same sizes at every load and policy; ``entropy: per_flow`` (ECMP hashes each lane, a
queue pair, onto one path) against ``entropy: spray`` (64 UDP source ports per QP, each packet its own).
Prints per run the slowdown.csv rows (size bucket, n, p50, p95, p99; slowdown = FCT / FCT alone on an idle
path, below 1 as 1 as HPCC prints it; ``below 1``: flows measured under 1), the overall p50/p99, the offered
load, retransmissions and the verdict.

Needs root; run under the fabric lock. Usage::

    flock /tmp/fabric.lock python benchmarks/open_loop_slowdown.py [--flows 400] [--loads 0.3 0.6]
        [--entropy per_flow spray] [--cdf websearch] [--buckets 5] [--size-scale 0.01] [--results DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from testbed.results.rundir import RunDir
from testbed.results.slowdown import format_slowdown

#: transport keys per entropy policy (spray: 64 ports per QP, as benchmarks/ecmp_collisions.py)
ENTROPY = {"per_flow": {"entropy": "per_flow"}, "spray": {"entropy": "spray", "entropy_ports": 64}}


def scenario(cdf: str, load: float, entropy: str, flows: int, buckets: int, seed: int, size_scale: float) -> dict:
    """The scenario of one point (module docstring)."""
    return {
        "name": f"open_loop_{cdf}_{int(round(load * 100))}_{entropy}", "seed": seed, "reference_link_bps": "400G",
        "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "host_link_bps": "10M", "fabric_link_bps": "10M",
                   "buffer_bytes": "100KB", "mtu_bytes": 4200},
        "transport": {"payload_bytes": 4096, "window_pkts": 16, "ack_every_pkts": 4, **ENTROPY[entropy]},
        "load_balance": {"policy": "ecmp"},
        "workload": {"open_loop": {"cdf": cdf, "load": load, "flows": flows, "buckets": buckets,
                                   "size_scale": size_scale}},
    }


def run(sc: dict, results: Path) -> tuple[dict, float]:
    """One ``testbed run`` of ``sc``; (its summary.json, wall seconds). Raises RuntimeError unless it completed
    (exit 0 faithful, 3 not faithful)."""
    path = results / f"{sc['name']}.yaml"
    path.write_text(yaml.safe_dump(sc))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(results), "--quiet"],
                       capture_output=True, text=True)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{path.name}: testbed run exited {p.returncode}: {p.stderr[-2000:]}")
    run_dir = next(results.glob(f"*-{sc['name']}-*"))
    return RunDir.open(run_dir).summary, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cdf", default="websearch")
    ap.add_argument("--flows", type=int, default=400)
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.6])
    ap.add_argument("--entropy", nargs="+", default=["per_flow", "spray"], choices=sorted(ENTROPY))
    ap.add_argument("--buckets", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--size-scale", type=float, default=0.01, help="workload.open_loop.size_scale")
    ap.add_argument("--results", default=None, help="keep the runs here (default: a temporary directory)")
    a = ap.parse_args()
    results = Path(a.results) if a.results else Path(tempfile.mkdtemp(prefix="open_loop_"))
    results.mkdir(parents=True, exist_ok=True)
    print(f"# open loop {a.cdf} x {a.size_scale:g}, {a.flows} flows per run, seed {a.seed}, 4 hosts / 2 leaves / 2 spines at "
          f"10 Mbit/s, policy ecmp; slowdown = FCT / FCT alone on an idle path; runs in {results}")
    for load in a.loads:
        for entropy in a.entropy:
            s, wall = run(scenario(a.cdf, load, entropy, a.flows, a.buckets, a.seed, a.size_scale), results)
            b, t = s["open_loop"], s["transport"]
            print(f"\n## load {load:.2f} (offered {b['offered_load']:.2f}), entropy {entropy}: {b['flows_done']} flows, "
                  f"slowdown p50 {b['slowdown_p50']:.2f} p99 {b['slowdown_p99']:.2f} min {b['slowdown_min']:.2f}; "
                  f"retx {t['retx_pkts']} pkts, timeouts {t['timeouts']}, drops {t['switch_drops_pkts']}; "
                  f"verdict {s['verdict']}; {wall:.0f} s")
            print("\n".join(format_slowdown(b["buckets"])))


if __name__ == "__main__":
    main()
