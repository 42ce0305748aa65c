"""Issue 16's fair-tail-drop case over seeds: two identical senders into one 32 KB tail-drop queue.

Two hosts on leaf 1 each send 8 MiB to one host on leaf 2 (one spine, 10 Mbit/s links, path MTU 4096,
window 16, ``congestion_control: none``). Each seed is a fresh ``testbed run``. Prints per seed the
switch-queue drops, each sender's share of the lost packets (fct.csv ``lost_pkts``), the goodput Jain
index while both send (summary.json ``load_balance.overlap_jain_mean``), the loss identity's
unexplained packets and the verdict; then the issue's bands:

- each sender's drop share within 35-65 % in every seed with >= 200 drops;
- the larger loser not the same host in every seed;
- goodput Jain >= 0.95 while both run;
- 0 losses outside the emulated queues (the identity's elsewhere + unexplained).

``--clock-wander off`` (or a fraction) runs the same with ``fabric.clock_wander`` set, to show the
phase effect it removes; ``--loss-recovery`` sets ``transport.loss_recovery`` where the spec has it.

As root, each run under the fabric lock (about 40 s each):
``.venv/bin/python benchmarks/fair_tail_drop.py [--seeds 1-10] [--results DIR]``
(``--lock`` takes ``flock /tmp/fabric.lock`` per run); ``--from DIR`` re-reads finished runs.
Exit code 0 when every band holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from testbed.results.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = """name: fair-tail-drop
seed: {seed}
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 32KB,
         mtu_bytes: 4200{fabric}}}
transport: {{congestion_control: none, payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4{transport}}}
workload:
  pattern: {{kind: flows, flows: [{{src: h1, dst: h3, size_bytes: 8MiB}}, {{src: h2, dst: h3, size_bytes: 8MiB}}]}}
"""


def seeds_of(text: str) -> list[int]:
    """``1-10`` or ``1,3,5`` -> the seeds."""
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def run(seed: int, out: Path, args) -> None:
    fabric = f", clock_wander: {args.clock_wander}" if args.clock_wander else ""
    transport = f", loss_recovery: {args.loss_recovery}" if args.loss_recovery else ""
    path = out / f"seed{seed}.yaml"
    path.write_text(SCENARIO.format(seed=seed, fabric=fabric, transport=transport))
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(out / f"seed{seed}"), "--quiet"]
    if args.lock:
        cmd = ["flock", "/tmp/fabric.lock", *cmd]
    subprocess.run(cmd, cwd=ROOT, check=False, timeout=900, stdout=subprocess.DEVNULL)


def figures(out: Path, seed: int) -> dict:
    (run_dir,) = sorted((out / f"seed{seed}").glob("*/"))[-1:]
    run = RunDir.open(run_dir)
    s, fct = run.summary, run.fct
    lost = fct.groupby("src")["lost_pkts"].sum()
    i = s["fidelity"]["transport_loss"]
    return {"seed": seed, "drops": int(i["switch_queue_drops_pkts"]), "lost_h1": int(lost.get("h1", 0)),
            "lost_h2": int(lost.get("h2", 0)), "share_h1": float(lost.get("h1", 0) / max(lost.sum(), 1)),
            "jain": s["load_balance"]["overlap_jain_mean"], "timeouts": s["transport"]["timeouts"],
            "outside": int(i["elsewhere_pkts"] + i["unexplained_pkts"]), "verdict": s["verdict"]}


def bands(rows: pd.DataFrame) -> list[tuple[str, bool]]:
    judged = rows[rows["drops"] >= 200]
    shares = pd.concat([judged["share_h1"], 1 - judged["share_h1"]])
    losers = set((judged["share_h1"] > 0.5).map({True: "h1", False: "h2"}))
    return [("drop share within 35-65 % (seeds with >= 200 drops)", bool(shares.between(0.35, 0.65).all())),
            ("the larger loser changes with the seed", len(losers) > 1),
            ("goodput Jain >= 0.95 while both send", bool((rows["jain"] >= 0.95).all())),
            ("0 losses outside the emulated queues", bool((rows["outside"] == 0).all()))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--results", type=Path, default=None)
    ap.add_argument("--from", dest="from_dir", type=Path, default=None, help="re-read finished runs")
    ap.add_argument("--clock-wander", default=None, help="fabric.clock_wander (a fraction or off)")
    ap.add_argument("--loss-recovery", default=None, help="transport.loss_recovery")
    ap.add_argument("--lock", action="store_true", help="take flock /tmp/fabric.lock for each run")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)
    out = args.from_dir or args.results or Path(tempfile.mkdtemp(prefix="fair-tail-drop-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.from_dir is None:
        for seed in seeds:
            run(seed, out, args)
    rows = pd.DataFrame([figures(out, s) for s in seeds])
    print(rows.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"# shares h1 {rows['share_h1'].min():.3f}-{rows['share_h1'].max():.3f}; Jain min {rows['jain'].min():.3f}, "
          f"{int((rows['jain'] >= 0.95).sum())} of {len(rows)} >= 0.95; h1 lost more in "
          f"{int((rows['share_h1'] > 0.5).sum())} of {len(rows)}; results in {out}")
    ok = True
    for name, held in bands(rows):
        print(f"# {'holds' if held else 'FAILS'}: {name}")
        ok &= held
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
