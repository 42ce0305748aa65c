"""Ring vs double binary tree vs recursive halving-doubling all-reduce over a size sweep: where does ring win?

Runs ``testbed nccl`` once per algorithm on the quickstart fabric (2 spines,
4 leaves, 8 hosts, 10 Mbit/s, path MTU 4096) with switch buffers of
``--buffer-bytes`` (default 512 KB: a tree node's fan-in of two children and a
parent, 3 x 64 KiB windows, overflows the quickstart's 100 KB without PFC), and
prints per size each algorithm's time (us; the span, first rank's start to
last rank's end) and busbw/link, the fastest algorithm, and the crossover: the
smallest size from which ring is fastest at every larger size.

Expected shape (NCCL's tuning model): ring takes 2(n-1) = 14 steps, tree and
halving-doubling 2 log2 n = 6, so at small sizes, where each step's fixed
cost dominates, they win; at large sizes ring's bandwidth optimality wins
(tree inner nodes send 2 S against ring's 1.75 S; halving-doubling sends
1.75 S but its cross-leaf exchanges collide on ECMP uplinks).

Needs root; each run takes the fabric lock itself when ``--lock`` is given::

    .venv/bin/python benchmarks/allreduce_crossover.py --lock /tmp/fabric.lock

Usage: ``python benchmarks/allreduce_crossover.py [-b 4K] [-e 4M] [-f 2] [-n 3] [-w 1]
[--algorithms ring,tree,halving_doubling] [--buffer-bytes 512KB] [--lock FILE]``
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from testbed.results.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


def run_one(algorithm: str, scenario: Path, results: Path, args) -> pd.DataFrame:
    """One ``testbed nccl`` run; its sizes.csv with the run's verdict in column ``faithful``."""
    cmd = [sys.executable, "-m", "testbed.cli", "nccl", str(scenario), "-c", "allreduce", "-a", algorithm,
           "-b", args.b, "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w", str(args.w),
           "--results", str(results / algorithm), "--quiet"]
    if args.lock:
        cmd = ["flock", args.lock] + cmd
    res = subprocess.run(cmd, capture_output=True, text=True)
    print(res.stdout, file=sys.stderr)
    if res.returncode not in (0, 3):
        raise SystemExit(f"testbed nccl -a {algorithm} exited {res.returncode}: {res.stderr[-2000:]}")
    (run_dir,) = (results / algorithm).iterdir()
    sizes = RunDir.open(run_dir).sizes
    sizes["faithful"] = res.returncode == 0
    return sizes


def crossover(table: pd.DataFrame, others: list[str]) -> int | None:
    """Smallest size from which ring's time is below every other algorithm's at every larger size."""
    ring_best = [all(row["ring"] < row[o] for o in others) for _, row in table.iterrows()]
    for i in range(len(ring_best)):
        if all(ring_best[i:]):
            return int(table.index[i])
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", default="4K")
    ap.add_argument("-e", default="4M")
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("-w", type=int, default=1)
    ap.add_argument("--algorithms", default="ring,tree,halving_doubling")
    ap.add_argument("--buffer-bytes", default="512KB")
    ap.add_argument("--lock", default=None, help="flock this file around each run (e.g. /tmp/fabric.lock)")
    args = ap.parse_args(argv)
    algs = args.algorithms.split(",")
    with tempfile.TemporaryDirectory(prefix="crossover-") as tmp:
        tmp = Path(tmp)
        data = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
        data["fabric"]["buffer_bytes"] = args.buffer_bytes
        scenario = tmp / "crossover.yaml"
        scenario.write_text(yaml.safe_dump(data))
        runs = {a: run_one(a, scenario, tmp, args) for a in algs}
    time_us = pd.DataFrame({a: r.set_index("size_bytes")["time_us"] for a, r in runs.items()})
    ratio = pd.DataFrame({a: r.set_index("size_bytes")["busbw_ratio"] for a, r in runs.items()})
    print(f"# all-reduce on 8 hosts, quickstart fabric, buffers {args.buffer_bytes}; time = span (us), "
          f"busbw/link = busbw / (link x payload efficiency); faithful: "
          + ", ".join(f"{a} {bool(r['faithful'].all())}" for a, r in runs.items()))
    head = f"{'size(B)':>9} " + " ".join(f"{a[:12] + ' us':>15}" for a in algs) + " " + \
        " ".join(f"{a[:9] + ' b/l':>13}" for a in algs) + f" {'fastest':>16}"
    print(head)
    for size in time_us.index:
        t, r = time_us.loc[size], ratio.loc[size]
        print(f"{size:>9} " + " ".join(f"{t[a]:>15.0f}" for a in algs) + " " +
              " ".join(f"{r[a]:>13.3f}" for a in algs) + f" {t.idxmin():>16}")
    if "ring" in algs and len(algs) > 1:
        x = crossover(time_us, [a for a in algs if a != "ring"])
        print(f"# crossover: ring is fastest from {x} B up" if x is not None else
              "# crossover: ring is not the fastest at the largest sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
