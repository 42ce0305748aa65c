"""ECMP hash collisions of k long flows over k equal paths: the fabric capacity they leave idle.

A spine-leaf fabric of k spines, 2 leaves and k hosts per leaf (all links
``--rate-bps``, userspace OVS, the os-ken controller, ``load_balance.policy``
``--policy``): host i of leaf 1 sends one long RoCEv2 flow (traffic.flows, one
QP) to host i of leaf 2, all k at once, each from a UDP source port drawn at
random per trial (the per-flow entropy a QP gets). Each flow picks a spine by
the leaf's select-group hash; flows on the same spine share its links. While
every flow is still sending (from 30% to 80% of one flow's solo time), the
leaf's k uplinks are sampled: aggregate throughput / (k x link rate) is the
share of the fabric's capacity in use (retransmissions included: the ``retx``
column says how much of it was resent). Balls into bins: k flows on k paths
occupy on average 1 - (1 - 1/k)^k of them (75.0% for k = 2, 68.4% for k = 4).

Prints one row per k: trials, mean, 5th percentile and spread of the
throughput ratio, the mean number of spines used, against the expectation.
Needs root. Usage: ``python benchmarks/ecmp_collisions.py [--trials 20] [--k 2 4]``
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from testbed.emulation.fabric import Fabric
from testbed.host.runlock import RunLock
from testbed.naming import new_run_id
from testbed.spec.scenario import parse_scenario

PAYLOAD_BYTES = 1024
#: packets in flight per flow (--window-pkts): 16 KiB, so even k = 4 flows on one spine (64 KiB) fit
#: its 100 kB buffers: a collision halves rates, it does not drop (no PFC here to make the fabric
#: lossless). Spraying needs a larger window: its packets wait behind the slowest path's queue.
WINDOW_PKTS = 16


def _tx_bytes(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_bytes").read_text())


def trial(fab, k: int, sports: list[int], size_bytes: int, rate_bps: float, entropy: str = "per_flow",
          entropy_ports: int = 128, flowlet_gap_us: int = 100_000, window_pkts: int = WINDOW_PKTS
          ) -> tuple[float, int, dict]:
    """One trial: (aggregate uplink throughput / (k x rate) while all flows send, spines used, transport
    counters summed over the flows: tx_pkts, retx_pkts, out_of_order_pkts, order_errors, dup_pkts, and the
    largest max_reorder_pkts)."""
    lay = fab.layout
    leaf1 = lay.attachment(lay.hosts[0].name).node
    uplinks = [ln.a.intf for ln in lay.links if ln.a.node == leaf1 and ln.b.node not in {h.name for h in lay.hosts}]
    common = [sys.executable, "-m", "traffic.flows", "--run-id", fab.run_id, "--timeout-s", "60",
              "--payload-bytes", str(PAYLOAD_BYTES), "--window-pkts", str(window_pkts), "--entropy", entropy, "--entropy-ports", str(entropy_ports),
              "--flowlet-gap-us", str(flowlet_gap_us)]
    rx, tx = [], []
    for i in range(k):
        src, dst = lay.hosts[i], lay.hosts[k + i]
        r = fab.host(k + i).popen(common + ["recv", "--ip", dst.ip, "--peer", src.ip, "--flows", "1",
                                            "--size-bytes", str(size_bytes)], stdin=-1, text=True)
        rx.append(r)
        t = fab.host(i).popen(common + ["send", "--ip", src.ip, "--peer", dst.ip, "--sports", str(sports[i]),
                                        "--size-bytes", str(size_bytes)], stdin=-1, text=True)
        tx.append(t)
    for p in rx + tx:
        assert json.loads(p.stdout.readline())["event"] == "ready"
    solo_s = size_bytes * 8 / rate_bps
    for t in tx:
        t.stdin.write("go\n")
        t.stdin.flush()
    time.sleep(0.3 * solo_s)
    b0, t0 = [_tx_bytes(u) for u in uplinks], time.monotonic()
    time.sleep(0.5 * solo_s)
    b1, t1 = [_tx_bytes(u) for u in uplinks], time.monotonic()
    counts = dict.fromkeys(("tx_pkts", "retx_pkts", "out_of_order_pkts", "order_errors", "dup_pkts"), 0)
    counts["max_reorder_pkts"] = 0
    for p in tx + rx:
        out = json.loads(p.stdout.readline())
        assert out["ok"], out
        p.wait(timeout=30)
        for f in out["flows"]:
            for key in counts:
                if key in f:
                    counts[key] = max(counts[key], f[key]) if key == "max_reorder_pkts" else counts[key] + f[key]
    moved = np.array(b1) - np.array(b0)
    ratio = float(moved.sum() * 8 / (t1 - t0) / (k * rate_bps))
    return ratio, int((moved > 0.1 * moved.max()).sum()), counts


def run_k(k: int, trials: int, rate_bps: float, size_bytes: int, policy: str, entropy: str = "per_flow",
          entropy_ports: int = 128, flowlet_gap_us: int = 100_000, window_pkts: int = WINDOW_PKTS) -> dict:
    spec = parse_scenario({"name": "ecmpk", "fabric": {"spines": k, "leaves": 2, "hosts_per_leaf": k,
                                                       "host_link_bps": rate_bps, "fabric_link_bps": rate_bps},
                           "load_balance": {"policy": policy},
                           "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}})
    rid = new_run_id()
    ratios, used, totals = [], [], {}
    with tempfile.TemporaryDirectory() as tmp, RunLock(rid), Fabric(spec, rid, Path(tmp), "user") as fab:
        for n in range(trials):
            sports = random.Random(f"ecmp-{k}-{n}").sample(range(49152, 65536), k)
            r, u, counts = trial(fab, k, sports, size_bytes, rate_bps, entropy, entropy_ports, flowlet_gap_us,
                                 window_pkts)
            ratios.append(r)
            used.append(u)
            for key, v in counts.items():
                totals[key] = max(totals.get(key, 0), v) if key == "max_reorder_pkts" else totals.get(key, 0) + v
    a = np.array(ratios)
    return {"k": k, "trials": trials, "throughput_ratio_mean": float(a.mean()),
            "throughput_ratio_p5": float(np.percentile(a, 5)), "throughput_ratio_std": float(a.std(ddof=1)),
            "spines_used_mean": float(np.mean(used)), "expected": 1 - (1 - 1 / k) ** k,
            "retx_fraction": totals["retx_pkts"] / max(totals["tx_pkts"], 1), **totals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rate-bps", type=float, default=20e6)
    ap.add_argument("--size-bytes", type=int, default=1 << 20)
    ap.add_argument("--policy", default="ecmp")
    ap.add_argument("--entropy", default="per_flow", help="per_flow (ECMP per flow), spray (per packet) or flowlet")
    ap.add_argument("--entropy-ports", type=int, default=128, help="ports per QP with spray or flowlet")
    ap.add_argument("--window-pkts", type=int, default=WINDOW_PKTS)
    ap.add_argument("--flowlet-gap-us", type=int, default=100_000,
                    help="flowlet gap (default: half the flows' 200 ms timeout, as transport.flowlet_gap_us)")
    a = ap.parse_args()
    print(f"# {a.policy} with {a.entropy} entropy, window {a.window_pkts} packets: k long flows ({a.size_bytes} B each) over k spines, {a.rate_bps / 1e6:g} Mbit/s links; "
          f"throughput ratio = aggregate uplink throughput while all flows send / (k x link rate)")
    print(f"{'k':>3} {'trials':>6} {'mean':>7} {'p5':>7} {'std':>7} {'spines used':>11} {'1-(1-1/k)^k':>12} "
          f"{'retx':>7} {'ooo pkts':>9} {'max reorder':>11} {'order err':>9}")
    for k in a.k:
        r = run_k(k, a.trials, a.rate_bps, a.size_bytes, a.policy, a.entropy, a.entropy_ports, a.flowlet_gap_us,
                  a.window_pkts)
        print(f"{k:>3} {r['trials']:>6} {r['throughput_ratio_mean']:>7.3f} {r['throughput_ratio_p5']:>7.3f} "
              f"{r['throughput_ratio_std']:>7.3f} {r['spines_used_mean']:>11.2f} {r['expected']:>12.3f} "
              f"{r['retx_fraction']:>7.4f} {r['out_of_order_pkts']:>9} {r['max_reorder_pkts']:>11} "
              f"{r['order_errors']:>9}")


if __name__ == "__main__":
    main()
