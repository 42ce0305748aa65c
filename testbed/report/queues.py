"""Queue depth plots from ports.csv (the qdisc sampler, dataplane.qdisc_sampler): a ports x time heatmap
of the whole fabric and lines for the busiest ports.

Each cell is the largest backlog sampled in its time bin (so a short burst is
not averaged away); the busiest ports are those with the largest mean backlog.
"""
from __future__ import annotations

import numpy as np

from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.portgrid import heatmap, port_grid
from testbed.results.rundir import RunDir

#: how many of the busiest ports get their own line
BUSIEST_PORTS = 6
_NO_SAMPLES = "no switch queue samples (ports.csv absent: the sampler did not run)"


def queue_heatmap_plot(run: RunDir) -> Plot:
    """Backlog (KB) of every switch egress port over time."""
    key, title = "queue_heatmap", "Queue depth per switch port (whole fabric)"
    grid = port_grid(run, "backlog_bytes", "max")
    if grid is None:
        return absent(key, title, _NO_SAMPLES)
    fig = new_figure(10.5, 1.6 + 0.22 * len(grid.ports), left_in=1.3, right_in=0.1)
    ax = fig.add_subplot()
    img = heatmap(ax, grid, grid.values / 1e3, "magma_r", vmin=0)
    fig.colorbar(img, ax=ax, label="queue depth: largest backlog in the bin (KB)", pad=0.01)
    ax.set_ylabel("switch egress port > next node")
    ax.set_title(title)
    peak = np.nanmax(grid.values) if grid.values.size else 0
    return rendered(key, title, fig, f"ports.csv backlog_bytes, {len(grid.edges) - 1} time bins of "
                    f"{np.diff(grid.edges).mean() * 1e3:.0f} ms; largest backlog {peak / 1e3:.1f} KB.")


def busiest_ports_plot(run: RunDir) -> Plot:
    """Backlog (KB) over time of the :data:`BUSIEST_PORTS` ports with the largest mean backlog."""
    key, title = "queue_busiest", f"Queue depth of the {BUSIEST_PORTS} busiest ports"
    grid = port_grid(run, "backlog_bytes", "max", max_bins=1000)
    if grid is None:
        return absent(key, title, _NO_SAMPLES)
    mean = np.nan_to_num(np.nanmean(np.where(np.isnan(grid.values), 0, grid.values), axis=1))
    if not (mean > 0).any():
        return absent(key, title, f"no switch port held a queue: every sample of {len(grid.ports)} ports was 0 B")
    top = [i for i in np.argsort(-mean)[:BUSIEST_PORTS] if mean[i] > 0]
    mid = (grid.edges[:-1] + grid.edges[1:]) / 2
    fig = new_figure(10, 4)
    ax = fig.add_subplot()
    for i in top:
        ax.plot(mid, grid.values[i] / 1e3, linewidth=1, label=f"{grid.labels[i]} (mean {mean[i] / 1e3:.1f} KB)")
    _thresholds(ax, run)
    ax.set_xlabel("time since the first traffic (s)")
    ax.set_ylabel("queue depth (KB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    return rendered(key, title, fig, "ports.csv backlog_bytes, largest sample per bin; dotted: the "
                    "congestion thresholds of the run where it has them (summary.json congestion).")


def _thresholds(ax, run: RunDir) -> None:
    c = run.summary.get("congestion") or {}
    for name, style in (("kmin_bytes", ":"), ("kmax_bytes", ":"), ("xoff_bytes", "-."), ("xon_bytes", "-.")):
        v = c.get(name) or (c.get("pfc") or {}).get(name)
        if v:
            ax.axhline(float(v) / 1e3, color="grey", linestyle=style, linewidth=0.8)
            ax.annotate(name.replace("_bytes", ""), (0.005, float(v) / 1e3), xycoords=("axes fraction", "data"),
                        fontsize=7, color="dimgrey", ha="left", va="bottom")
