"""``testbed report RUN_DIR``: remake a run's report.html from the tables in its directory.

Exit codes: 0 written (its path and the time it took, matplotlib's import
included, on stdout); 2 RUN_DIR is not a run directory (``testbed: error:
RUN_DIR '<path>': ...``).
"""
from __future__ import annotations

import sys
import time


def add_parser(sub, parents) -> None:
    """Add ``report`` to the subcommands ``sub``."""
    p = sub.add_parser("report", parents=parents, help="remake a run's report.html from its tables",
                       description="Remake RUN_DIR/report.html (plots and tables, self-contained: opens "
                       "offline) from the tables the run wrote. No root needed.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory: results/<UTC time>-<name>-<run id>/")


def after_run(run_dir) -> str:
    """Write ``run_dir``'s report.html at the end of a run; return the line to print. Never raises: a
    report that cannot be made costs a warning line, not the run's results or exit code.

    The time includes importing matplotlib (the whole cost a run pays).
    """
    t0 = time.perf_counter()
    try:
        from testbed.report import write_report

        path, _ = write_report(run_dir)
    except Exception as e:  # noqa: BLE001
        return f"testbed: warning: report.html not written: {type(e).__name__}: {e}"
    return f"# report: {path} ({time.perf_counter() - t0:.2f} s)"


def run(args) -> int:
    """Entry of ``testbed report``; returns the exit code."""
    from testbed.report import write_report
    from testbed.results.rundir import NotARunDir

    t0 = time.perf_counter()
    try:
        path, _ = write_report(args.run_dir)
    except NotARunDir as e:
        print(f"testbed: error: RUN_DIR {e}", file=sys.stderr)
        return 2
    print(f"report: {path} ({time.perf_counter() - t0:.2f} s)")
    return 0
