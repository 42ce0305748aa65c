"""Issue 7's congestion acceptance on the incast and victim-flow scenarios, from their summary.json.

Runs (``testbed run``) scenarios/incast_dcqcn.yaml, incast_pfc.yaml, incast_both.yaml,
victim_flow.yaml (PFC only) and victim_flow_dcqcn.yaml (PFC + ECN + DCQCN), or the ones named, and
prints each run's ``congestion`` block figures (testbed.results.congestion_flows defines them), then
the acceptance:

- DCQCN 4:1 incast (incast_dcqcn, incast_both): after convergence Jain >= 0.95, bottleneck utilization
  >= 0.90, p99 lossless queue of the bottleneck port < Kmax + 2 full frames; CNPs paced (at most one
  per CNP interval per QP: ``cnp_per_interval_max`` <= 1, from the NPs' counters over the QPs' busy
  time); with PFC also on, no pause in the steady window (pfc_events.csv).
- victim flow: PFC only, the victim's goodput dips during the burst; with DCQCN too the dip is shorter;
  0 lossless drops in both.

Run under the fabric lock, as root (about 70 s per scenario):
``flock /tmp/fabric.lock .venv/bin/python benchmarks/incast_congestion.py [names...] [--results DIR]``
``--from DIR`` reads finished runs (one sub-directory per scenario name) instead of running.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.results.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("incast_dcqcn", "incast_pfc", "incast_both", "victim_flow", "victim_flow_dcqcn")
KEYS = ("lossless_drops_pkts", "pause_frames", "paused_time_s", "ce_marked_pkts", "cnp_sent", "cnp_per_interval_max",
        "cnp_min_gap_ms", "jain_index", "bottleneck_port", "bottleneck_util", "queue_p99_bytes", "kmax_bytes",
        "controller_loop_p50_ms", "controller_loop_p99_ms", "storms", "steady_s")


def run(name: str, results: Path) -> dict:
    out = results / name
    subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(ROOT / "scenarios" / f"{name}.yaml"),
                    "--results", str(out)], check=False, timeout=600)
    return summary_of(out)


def summary_of(out: Path) -> dict:
    (path,) = sorted(out.glob("*/summary.json"))[-1:]
    return RunDir.open(path.parent).summary


def steady_pauses(s: dict) -> int | None:
    """Pauses sent in the steady window (pfc_events.csv), None without PFC or a window."""
    c = s["congestion"]
    ev = RunDir.open(s["run_dir"]).table("pfc_events") if c.get("steady_start_ns") is not None else None
    if ev is None:
        return None
    t0 = c["steady_start_ns"]
    t1 = t0 + c["steady_s"] * 1e9
    return int(((ev["event"] == "pause") & (ev["time_ns"] >= t0) & (ev["time_ns"] <= t1)).sum())


def incast_verdict(s: dict, frame_bytes: int) -> list[str]:
    c = s["congestion"]
    fails = []
    if (c.get("jain_index") or 0) < 0.95:
        fails.append(f"Jain {c.get('jain_index')} < 0.95")
    if (c.get("bottleneck_util") or 0) < 0.90:
        fails.append(f"bottleneck utilization {c.get('bottleneck_util')} < 0.90")
    if c.get("queue_p99_bytes") is None or c["queue_p99_bytes"] >= c["kmax_bytes"] + 2 * frame_bytes:
        fails.append(f"queue p99 {c.get('queue_p99_bytes')} B >= Kmax + 2 frames {c['kmax_bytes'] + 2 * frame_bytes} B")
    if (c.get("cnp_per_interval_max") or 0) > 1:
        fails.append(f"CNPs per interval per QP {c['cnp_per_interval_max']} > 1")
    pauses = steady_pauses(s)
    if pauses:
        fails.append(f"{pauses} pauses in the steady window")
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--results", type=Path, default=None, help="where the runs go (default: a temporary directory)")
    ap.add_argument("--from", dest="from_dir", type=Path, default=None, help="read finished runs from here")
    a = ap.parse_args()
    results = a.from_dir or a.results or Path(tempfile.mkdtemp(prefix="incast_congestion."))
    summaries = {n: (summary_of(results / n) if a.from_dir else run(n, results)) for n in a.names}
    ok = True
    for name, s in summaries.items():
        c = s.get("congestion") or {}
        print(f"{name}: run {s['run_dir']}")
        print("  " + ", ".join(f"{k} {c[k]}" for k in KEYS if c.get(k) is not None))
        if c.get("steady_goodput_bps") is not None:
            print(f"  steady goodputs bit/s {c['steady_goodput_bps']}; steady pauses {steady_pauses(s)}")
        for v in c.get("victim") or []:
            print(f"  victim flow {v['flow']} {v['src']}->{v['dst']}: baseline {v['baseline_bps'] / 1e6:.2f} Mbit/s, "
                  f"min {v['min_bps'] / 1e6:.2f} Mbit/s, dip depth {v['dip_depth']:.3f}, duration "
                  f"{v['dip_duration_s']:.3f} s (burst {v['burst_s']:.3f} s)")
        if name in ("incast_dcqcn", "incast_both"):
            fails = incast_verdict(s, frame_bytes=4214)
            ok &= not fails
            print(f"  acceptance: {'PASS' if not fails else 'FAIL: ' + '; '.join(fails)}")
    if {"victim_flow", "victim_flow_dcqcn"} <= set(summaries):
        pfc, both = (summaries[n]["congestion"] for n in ("victim_flow", "victim_flow_dcqcn"))
        dp, db = (c["victim"][0] if c.get("victim") else None for c in (pfc, both))
        fails = []
        if dp is None or dp["dip_duration_s"] <= 0:
            fails.append("PFC only: no victim dip")
        elif db is not None and db["dip_duration_s"] >= dp["dip_duration_s"]:
            fails.append(f"dip with DCQCN {db['dip_duration_s']} s not shorter than {dp['dip_duration_s']} s")
        fails += [f"{n}: {c['lossless_drops_pkts']} lossless drops" for n, c in
                  (("victim_flow", pfc), ("victim_flow_dcqcn", both)) if c.get("lossless_drops_pkts")]
        ok &= not fails
        print(f"victim acceptance: {'PASS' if not fails else 'FAIL: ' + '; '.join(fails)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
