"""PFC storm figures over repeated runs of scenarios/pfc_storm.yaml (issue 7's "Storm" acceptance).

Each run: h2's NIC sends PFC XOFF for 2 s (testbed.emulation.pfc_storm); the controller's PFC watchdog
detects the storm, drops toward h2, restores after the XON (controllers/congestion/rx_pauses.py).
Prints one row per run: storms, restores, detection time after the first XOFF, restore time after
the XON, packets dropped by the watchdog, lossless queue drops, bytes delivered exactly once, and the
goodput of the four flows not touching h2 before, while the pause spreads, after the detection and
after the restore (testbed.results.pfc_storm); then min / max of each and PASS / FAIL (one storm, one
restore after the XON, 0 lossless drops, every byte once, the rest at >= 85% of its rate before).

Run under the fabric lock, as root (about 90 s a run):
``flock /tmp/fabric.lock .venv/bin/python benchmarks/pfc_storm.py [--runs 3] [--json out.json]``
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.results.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ("storms", "restores", "storm_detect_ms", "storm_restore_after_end_ms", "watchdog_drops_pkts",
           "lossless_drops_pkts", "rest_goodput_before_bps", "rest_goodput_spreading_bps",
           "rest_goodput_during_bps", "rest_goodput_after_bps")


def one_run(results: Path) -> dict:
    """One ``testbed run`` of the scenario; the congestion figures and whether every byte arrived once."""
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(REPO / "scenarios" / "pfc_storm.yaml"),
                        "--results", str(results), "--quiet"], capture_output=True, text=True, cwd=REPO)
    summaries = sorted(results.glob("*/summary.json"))
    if p.returncode not in (0, 3) or not summaries:
        raise RuntimeError(f"testbed run exited {p.returncode}:\n{p.stderr[-2000:]}")
    s = RunDir.open(summaries[-1].parent).summary
    t, c = s["transport"], s["congestion"]
    row = {k: c.get(k) for k in COLUMNS}
    row["bytes_once"] = t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] and t["order_errors"] == 0
    row["faithful"] = s["faithful"]
    return row


def passed(r: dict) -> bool:
    return (r["storms"] == 1 and r["restores"] == 1 and r["storm_restore_after_end_ms"] is not None
            and r["lossless_drops_pkts"] == 0 and r["bytes_once"]
            and r["rest_goodput_during_bps"] >= 0.85 * r["rest_goodput_before_bps"]
            and r["rest_goodput_after_bps"] >= 0.85 * r["rest_goodput_before_bps"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pfc_storm_") as tmp:
        for k in range(args.runs):
            rows.append(one_run(Path(tmp) / f"run{k}"))
            r = rows[-1]
            print(f"run {k + 1}: storms {r['storms']} restores {r['restores']} detect {r['storm_detect_ms']} ms "
                  f"restore {r['storm_restore_after_end_ms']} ms after the XON, watchdog drops "
                  f"{r['watchdog_drops_pkts']}, lossless drops {r['lossless_drops_pkts']}, bytes once "
                  f"{r['bytes_once']}; rest Mbit/s before {r['rest_goodput_before_bps'] / 1e6:.1f} spreading "
                  f"{r['rest_goodput_spreading_bps'] / 1e6:.1f} during {r['rest_goodput_during_bps'] / 1e6:.1f} "
                  f"after {r['rest_goodput_after_bps'] / 1e6:.1f}; faithful {r['faithful']}", flush=True)
    for key in ("storm_detect_ms", "storm_restore_after_end_ms", "rest_goodput_spreading_bps",
                "rest_goodput_during_bps"):
        values = [r[key] for r in rows if r[key] is not None]
        print(f"{key}: min {min(values):.6g} max {max(values):.6g}" if values else f"{key}: none")
    ok = all(passed(r) for r in rows)
    print("PASS" if ok else "FAIL")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
