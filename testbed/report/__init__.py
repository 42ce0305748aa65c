"""report.html of a run: plots (matplotlib, Agg) and tables on one self-contained page.

:func:`write_report` reads a run directory's tables (testbed.results.rundir.RunDir; testbed.report.data),
makes each plot of ``testbed.report.build.PLOTS`` in order (one module per
plot family: perf, queues, links, congestion, rates) and writes
``report.html`` beside them (testbed.report.page). A plot whose data the run
lacks becomes the line ``not recorded in this run: <why>``.

It runs at the end of every ``testbed run`` (testbed.pipeline.summary) and by
``testbed report RUN_DIR`` (testbed.report.command). Adding a plot: a function
``(RunDir) -> Plot`` in a module of this package, one entry in ``PLOTS``.

Importing this package is cheap: matplotlib is imported only when a report is made.
"""
from __future__ import annotations

from pathlib import Path

REPORT_FILE = "report.html"


def write_report(run_dir: Path) -> tuple[Path, float]:
    """Write ``run_dir/report.html`` from the run's tables; return (its path, seconds it took).

    Raises testbed.results.rundir.NotARunDir naming ``run_dir`` when it is not a run directory. A plot
    that fails on odd data is replaced by a line naming the error (the rest of the report is still written).
    """
    from testbed.report.build import write_report as _write

    return _write(run_dir)
