"""Load balancing on k long flows over k equal paths: ECMP's hash collisions against flowlets and spraying.

Runs ``scenarios/lb_flows_ecmp.yaml`` (the ``kflows`` pattern: host i of leaf 1 sends one long flow to
host i of leaf 2, all k at once, on a fabric of k spines and k hosts per leaf) through ``testbed run``,
once per entropy policy and k, each with ``--trials`` trials (a new entropy seed each), and prints the
``load_balance`` block of each run: the mean and 5th percentile of the throughput ratio (payload
delivered while every flow sends / what perfect balancing delivers; testbed.patterns.results), the idle
uplink capacity, the balance index, retransmissions and packets placed out of order, against the
balls-into-bins expectation 1 - (1 - 1/k)^k (75.0% for k = 2, 68.4% for k = 4).

Needs root; run under the fabric lock. Usage::

    python benchmarks/ecmp_collisions.py [--trials 20] [--k 2 4] [--entropy per_flow spray flowlet]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "lb_flows_ecmp.yaml"
#: transport keys per entropy policy (spray: 64 ports per QP; flowlet: 8 ports, a 100 ms gap)
ENTROPY = {"per_flow": {"entropy": "per_flow"}, "spray": {"entropy": "spray", "entropy_ports": 64},
           "flowlet": {"entropy": "flowlet", "entropy_ports": 8, "flowlet_gap_us": 100_000}}


def run(k: int, entropy: str, trials: int, size: str, results: Path) -> dict:
    """One ``testbed run`` of the kflows scenario with k spines, k hosts per leaf and ``entropy``;
    returns its summary.json (``load_balance``, ``transport``, ``faithful``)."""
    sc = yaml.safe_load(SCENARIO.read_text())
    sc["name"] = f"kflows_{entropy}_k{k}"
    sc["fabric"].update(spines=k, hosts_per_leaf=k)
    sc["transport"].update(ENTROPY[entropy])
    sc["workload"]["pattern"].update(k=k, trials=trials, size_bytes=size)
    path = results / f"{sc['name']}.yaml"
    path.write_text(yaml.safe_dump(sc))
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(results),
                        "--quiet"], capture_output=True, text=True)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{path.name}: testbed run exited {p.returncode}: {p.stderr[-2000:]}")
    run_dir = next(results.glob(f"*-{sc['name']}-*"))
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--entropy", nargs="+", default=["per_flow", "spray", "flowlet"], choices=sorted(ENTROPY))
    ap.add_argument("--size", default="1MiB", help="bytes per flow")
    ap.add_argument("--results", default=None, help="keep the runs here (default: a temporary directory)")
    a = ap.parse_args()
    print(f"# kflows over k spines (scenarios/lb_flows_ecmp.yaml), {a.size} per flow, {a.trials} trials per row; "
          f"throughput = payload while all flows send / ideal")
    print(f"{'entropy':>9} {'k':>2} {'trials':>6} {'mean':>6} {'p5':>6} {'1-(1-1/k)^k':>11} {'idle':>6} "
          f"{'balance':>7} {'slowdown p50':>12} {'p99':>6} {'retx':>7} {'ooo pkts':>8} {'faithful':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.results or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for entropy in a.entropy:
            for k in a.k:
                s = run(k, entropy, a.trials, a.size, root)
                lb, t = s["load_balance"], s["transport"]

                def f(v):
                    return "n/a" if v is None else f"{v:.3f}"
                print(f"{entropy:>9} {k:>2} {lb['trials']:>6} {f(lb['throughput_ratio_mean']):>6} "
                      f"{f(lb['throughput_ratio_p5']):>6} {1 - (1 - 1 / k) ** k:>11.3f} "
                      f"{f(lb['idle_capacity_fraction']):>6} {f(lb['balance_index']):>7} "
                      f"{f(lb['slowdown_p50']):>12} {f(lb['slowdown_p99']):>6} {t['retx_pkts']:>7} "
                      f"{lb['reorder_pkts']:>8} {str(s['faithful']):>8}", flush=True)


if __name__ == "__main__":
    main()
