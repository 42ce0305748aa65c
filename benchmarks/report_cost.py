"""Cost of report.html: how long ``testbed report`` takes on existing run directories.

For each RUN_DIR prints the rows of ports.csv (the largest table), the wall time of
``testbed report RUN_DIR`` in a fresh process (what a run pays at its end: matplotlib's
import included; min and median of ``--repeat``), and per plot the time in a warm process.
Budget: under 3 s for the quickstart (issue 10). No root needed; changes nothing but report.html.
Usage: ``python benchmarks/report_cost.py RUN_DIR [RUN_DIR ...] [--repeat 3]``
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from testbed.report.build import PLOTS
    from testbed.results.rundir import RunDir

    for d in args.run_dirs:
        cold = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(d)], check=True, capture_output=True)
            cold.append(time.perf_counter() - t0)
        run = RunDir.open(d)
        ports = run.table("ports")
        per_plot = []
        for make in PLOTS:
            t0 = time.perf_counter()
            make(run)
            per_plot.append(f"{make.__name__.removesuffix('_plot')} {time.perf_counter() - t0:.2f}")
        print(f"{d.name}: ports.csv {0 if ports is None else len(ports)} rows; testbed report (fresh process, "
              f"import included) min {min(cold):.2f} s, median {statistics.median(cold):.2f} s of {args.repeat}; "
              f"warm per plot (s): {', '.join(per_plot)}")


if __name__ == "__main__":
    main()
