"""``testbed report RUN_DIR``: remake a run's report.html from the tables in its directory.

Exit codes: 0 written (its path and the time it took, matplotlib's import
included, on stdout); 2 RUN_DIR is not a run directory (``testbed: error:
RUN_DIR '<path>': ...``).
"""
from __future__ import annotations

import os
import sys
import time


def add_parser(sub, parents) -> None:
    """Add ``report`` to the subcommands ``sub``."""
    p = sub.add_parser("report", parents=parents, help="remake a run's report.html from its tables",
                       description="Remake RUN_DIR/report.html (plots and tables, self-contained: opens "
                       "offline) from the tables the run wrote. No root needed.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory: results/<UTC time>-<name>-<run id>/")


#: ``TESTBED_REPORT=off``: runs write no report.html (1-2 s of matplotlib a run; many scripted runs, the
#: test suite); ``testbed report RUN_DIR`` makes it later from the same tables
REPORT_ENV = "TESTBED_REPORT"


def after_run(run_dir) -> str:
    """Write ``run_dir``'s report.html at the end of a run; return the line to print. Never raises: a
    report that cannot be made costs a warning line, not the run's results or exit code. With
    ``TESTBED_REPORT=off`` nothing is written and the line says so and how to make it; a value other than
    on or off is named in a warning and the report is written.

    The time includes importing matplotlib (the whole cost a run pays).
    """
    wanted = os.environ.get(REPORT_ENV, "on")
    if wanted == "off":
        return f"# report: not written ({REPORT_ENV}=off; make it with: testbed report {run_dir})"
    if wanted != "on":
        return (f"testbed: warning: {REPORT_ENV}={wanted!r} is neither on nor off (the report is made); "
                + after_run_written(run_dir))
    return after_run_written(run_dir)


def after_run_written(run_dir) -> str:
    """Write report.html; the line to print (its path and time, or the warning that it was not written)."""
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
