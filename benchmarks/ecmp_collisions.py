"""Load balancing on traffic patterns: ECMP's hash collisions against flowlets and spraying.

Runs ``scenarios/lb_flows_ecmp.yaml`` (the ``kflows`` pattern: host i of leaf 1 sends one long flow to
host i of leaf 2, all k at once, on a fabric of k spines and k hosts per leaf) through ``testbed run``,
once per entropy policy and k, each with ``--trials`` trials (a new entropy seed each), and prints the
``load_balance`` block of each run: the mean and 5th percentile of the throughput ratio (payload
delivered while every flow sends / what perfect balancing delivers; testbed.workloads.pattern.results), the idle
uplink capacity, the balance index, retransmissions and packets placed out of order, against the
balls-into-bins expectation 1 - (1 - 1/k)^k (75.0% for k = 2, 68.4% for k = 4).

``--pattern permutation`` or ``alltoall`` runs ``scenarios/lb_permutation.yaml`` instead (8 hosts on 4
leaves, 1:1; all-to-all with ``--size`` per pair), where the figures that matter are the completion ratio
(ideal / measured time of the whole trial), the flows' slowdown p50/p99 and the idle uplink capacity.

Needs root; run under the fabric lock. Usage::

    python benchmarks/ecmp_collisions.py [--trials 20] [--k 2 4] [--entropy per_flow spray flowlet]
    python benchmarks/ecmp_collisions.py --pattern permutation --trials 10 --entropy per_flow spray
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from testbed.results.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {"kflows": REPO / "scenarios" / "lb_flows_ecmp.yaml",
             "permutation": REPO / "scenarios" / "lb_permutation.yaml",
             "alltoall": REPO / "scenarios" / "lb_permutation.yaml"}
#: transport keys per entropy policy (spray: 64 ports per QP; flowlet: 8 ports, a 100 ms gap)
ENTROPY = {"per_flow": {"entropy": "per_flow"}, "spray": {"entropy": "spray", "entropy_ports": 64},
           "flowlet": {"entropy": "flowlet", "entropy_ports": 8, "flowlet_gap_us": 100_000}}


def run(pattern: str, k: int | None, entropy: str, trials: int, size: str, results: Path, policy: str = "ecmp",
        window_pkts: int | None = None, rate_bps: float | None = None) -> dict:
    """One ``testbed run`` of ``pattern``'s scenario with ``entropy`` and ``load_balance.policy`` ``policy``
    (kflows: k spines and k hosts per leaf; ``window_pkts``, ``rate_bps``: override the scenario's window
    and every link's rate); returns its summary.json (``load_balance``, ``transport``, ``faithful``)."""
    sc = yaml.safe_load(SCENARIOS[pattern].read_text())
    sc["name"] = f"{pattern}_{policy}_{entropy}" + (f"_k{k}" if k else "")
    sc["transport"].update(ENTROPY[entropy])
    sc["load_balance"] = {"policy": policy}
    if window_pkts:
        sc["transport"]["window_pkts"] = window_pkts
    if rate_bps:
        sc["fabric"].update(host_link_bps=rate_bps, fabric_link_bps=rate_bps)
    sc["workload"]["pattern"].update(kind=pattern, trials=trials, size_bytes=size)
    if pattern == "kflows":
        sc["fabric"].update(spines=k, hosts_per_leaf=k)
        sc["workload"]["pattern"]["k"] = k
    path = results / f"{sc['name']}.yaml"
    path.write_text(yaml.safe_dump(sc))
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(results),
                        "--quiet"], capture_output=True, text=True)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{path.name}: testbed run exited {p.returncode}: {p.stderr[-2000:]}")
    run_dir = next(results.glob(f"*-{sc['name']}-*"))
    return RunDir.open(run_dir).summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--entropy", nargs="+", default=["per_flow", "spray", "flowlet"], choices=sorted(ENTROPY))
    ap.add_argument("--pattern", default="kflows", choices=sorted(SCENARIOS))
    ap.add_argument("--size", "--size-bytes", default="1MiB", help="bytes per flow")
    ap.add_argument("--policy", default="ecmp", help="load_balance.policy")
    ap.add_argument("--window-pkts", type=int, default=None, help="transport.window_pkts (default: the scenario's)")
    ap.add_argument("--rate-bps", type=float, default=None, help="every link's rate (default: the scenario's)")
    ap.add_argument("--results", default=None, help="keep the runs here (default: a temporary directory)")
    a = ap.parse_args()
    print(f"# {a.pattern} ({SCENARIOS[a.pattern].name}), policy {a.policy}, {a.size} per flow, {a.trials} trials per row; throughput = "
          f"payload while all flows send / ideal; completion = ideal / measured trial time")
    print(f"{'entropy':>9} {'k':>2} {'trials':>6} {'mean':>6} {'p5':>6} {'1-(1-1/k)^k':>11} {'compl.':>6} "
          f"{'p5':>6} {'idle':>6} {'balance':>7} {'slowdown p50':>12} {'p99':>6} {'retx':>7} {'ooo pkts':>8} "
          f"{'faithful':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.results or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for entropy in a.entropy:
            for k in (a.k if a.pattern == "kflows" else [None]):
                s = run(a.pattern, k, entropy, a.trials, a.size, root, a.policy, a.window_pkts, a.rate_bps)
                lb, t = s["load_balance"], s["transport"]

                def f(v):
                    return "n/a" if v is None else f"{v:.3f}"
                balls = f"{1 - (1 - 1 / k) ** k:.3f}" if k else "-"
                print(f"{entropy:>9} {k or '-':>2} {lb['trials']:>6} {f(lb['throughput_ratio_mean']):>6} "
                      f"{f(lb['throughput_ratio_p5']):>6} {balls:>11} {f(lb['completion_ratio_mean']):>6} "
                      f"{f(lb['completion_ratio_p5']):>6} "
                      f"{f(lb['idle_capacity_fraction']):>6} {f(lb['balance_index']):>7} "
                      f"{f(lb['slowdown_p50']):>12} {f(lb['slowdown_p99']):>6} {t['retx_pkts']:>7} "
                      f"{lb['reorder_pkts']:>8} {str(s['faithful']):>8}", flush=True)


if __name__ == "__main__":
    main()
