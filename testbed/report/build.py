"""The report's plots in page order (:data:`PLOTS`) and :func:`write_report` (see testbed.report)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from testbed.report import REPORT_FILE
from testbed.report.congestion import congestion_plot
from testbed.report.figure import Plot
from testbed.report.jobs import interference_plot, jobs_timeline_plot
from testbed.report.links import utilization_plot
from testbed.report.page import page_html
from testbed.report.perf import busbw_plot, latency_cdf_plot
from testbed.report.queues import busiest_ports_plot, queue_heatmap_plot
from testbed.report.rates import qp_rate_plot
from testbed.report.slowdown import slowdown_plot
from testbed.results.rundir import RunDir

#: the report's plots, in page order
PLOTS: tuple[Callable[[RunDir], Plot], ...] = (
    busbw_plot, latency_cdf_plot, queue_heatmap_plot, busiest_ports_plot, utilization_plot, congestion_plot,
    qp_rate_plot,
)
#: the plots a run of a jobs list adds (summary.json has a ``jobs`` block): timeline and interference matrix
JOB_PLOTS: tuple[Callable[[RunDir], Plot], ...] = (jobs_timeline_plot, interference_plot)
#: the plot an open-loop run adds (summary.json has an ``open_loop`` block): FCT slowdown by size
OPEN_LOOP_PLOTS: tuple[Callable[[RunDir], Plot], ...] = (slowdown_plot,)


def write_report(run_dir: Path) -> tuple[Path, float]:
    """Write ``run_dir/report.html`` from the run's tables; return (its path, seconds it took).

    Raises NotARunDir naming ``run_dir`` when it is not a run directory. A plot that fails on odd data is
    replaced by a line naming the error (the rest of the report is still written).
    """
    t0 = time.perf_counter()
    run = RunDir.open(run_dir)
    extra = (JOB_PLOTS if _has_block(run, "jobs") else ()) + (OPEN_LOOP_PLOTS if _has_block(run, "open_loop") else ())
    plots = [_make(f, run) for f in PLOTS + extra]
    out = run.path / REPORT_FILE
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page_html(run, plots, time.perf_counter() - t0), encoding="utf-8")
    os.replace(tmp, out)
    return out, time.perf_counter() - t0


def _has_block(run: RunDir, block: str) -> bool:
    """Whether the run's summary.json has a non-empty ``block`` (``jobs``, ``open_loop``)."""
    try:
        return bool(run.summary.get(block))
    except Exception:  # noqa: BLE001  no or unreadable summary.json: the common plots say why
        return False


def _make(make: Callable[[RunDir], Plot], run: RunDir) -> Plot:
    try:
        return make(run)
    except Exception as e:  # noqa: BLE001  one odd table must not cost the whole report
        name = make.__name__.removesuffix("_plot")
        return Plot(name, name.replace("_", " "), missing=f"could not be drawn: {type(e).__name__}: {e}")
