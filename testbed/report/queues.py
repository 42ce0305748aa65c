"""Queue depth plots from ports.csv (the qdisc sampler, dataplane.qdisc_sampler): a ports x time heatmap
of the whole fabric, and small multiples of the busiest ports: one panel per port, on shared axes, with
the run's thresholds (Kmin/Kmax, Xoff/Xon).

Small multiples rather than one panel of lines or the heatmap alone: a lab asks where a queue settles
against its thresholds (lab 2: Kmin and Kmax; lab 3: Xoff and Xon), a number a colour scale cannot give,
and six lines on one panel hide each other (on the quickstart, six ports' short bursts overlap into one
tangle); shared axes keep the panels comparable at a glance.

Each cell is the largest backlog sampled in its time bin (so a short burst is
not averaged away); the busiest ports are those with the largest mean backlog.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.report.data import lacking
from testbed.report.extent import fit_y
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.portgrid import heatmap, port_grid
from testbed.results.rundir import RunDir

#: how many of the busiest ports get their own line
BUSIEST_PORTS = 6


def _no_samples(run: RunDir) -> str:
    return "no switch queue samples: " + lacking(run, "ports", absent="the qdisc sampler did not run")


def queue_heatmap_plot(run: RunDir) -> Plot:
    """Backlog (KB) of every switch egress port over time."""
    key, title = "queue_heatmap", "Queue depth per switch port (whole fabric)"
    grid = port_grid(run, "backlog_bytes", "max")
    if grid is None:
        return absent(key, title, _no_samples(run))
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
    """Backlog (KB) over time of the :data:`BUSIEST_PORTS` ports with the largest mean backlog: one small
    panel per port (2 columns), all on the same time and depth axes, each with the run's thresholds."""
    key, title = "queue_busiest", "Queue depth of the busiest ports"
    grid = port_grid(run, "backlog_bytes", "max", max_bins=1000)
    if grid is None:
        return absent(key, title, _no_samples(run))
    mean = pd.DataFrame(grid.values).mean(axis=1).fillna(0).to_numpy()  # over the bins that have a sample
    if not (mean > 0).any():
        return absent(key, title, f"no switch port held a queue: every sample of {len(grid.ports)} ports was 0 B")
    top = [i for i in np.argsort(-mean)[:BUSIEST_PORTS] if mean[i] > 0]
    mid = (grid.edges[:-1] + grid.edges[1:]) / 2
    rows_n = (len(top) + 1) // 2
    fig = new_figure(10.5, 0.9 + 1.45 * rows_n, top_in=0.6, hspace=0.5, wspace=0.08)
    axes = fig.subplots(rows_n, 2, sharex=True, sharey=True, squeeze=False).ravel()
    for n, (ax, i) in enumerate(zip(axes, top)):
        kb = grid.values[i] / 1e3
        ax.fill_between(mid, 0, kb, color="tab:blue", alpha=0.3, linewidth=0)
        ax.plot(mid, kb, color="tab:blue", linewidth=0.9, label=grid.labels[i])
        _thresholds(ax, run)
        ax.set_title(f"{n + 1}. {grid.labels[i]}: mean {mean[i] / 1e3:.1f} KB, largest {np.nanmax(kb):.1f} KB",
                     fontsize="small", loc="left")
        ax.grid(True, alpha=0.3)
    for ax in axes[len(top):]:
        ax.set_visible(False)
    used = list(axes[:len(top)])
    fit_y(*used)
    for ax in used[-2:]:
        ax.set_xlabel("time since the first traffic (s)")
        ax.xaxis.set_tick_params(labelbottom=True)
    for ax in used[::2]:
        ax.set_ylabel("queue (KB)")
    fig.suptitle(f"Queue depth of the {len(top)} busiest ports (largest mean backlog)")
    return rendered(key, title, fig, "ports.csv backlog_bytes, largest sample per bin, one panel per port, "
                    "busiest (largest mean) first, all on the same axes; grey: the congestion thresholds of "
                    "the run where it has them (summary.json congestion).")


def _thresholds(ax, run: RunDir) -> None:
    c = run.summary.get("congestion") or {}
    for name, style in (("kmin_bytes", ":"), ("kmax_bytes", ":"), ("xoff_bytes", "-."), ("xon_bytes", "-.")):
        v = c.get(name) or (c.get("pfc") or {}).get(name)
        if v:
            ax.axhline(float(v) / 1e3, color="grey", linestyle=style, linewidth=0.8, label=name)
            ax.annotate(name.replace("_bytes", ""), (0.005, float(v) / 1e3), xycoords=("axes fraction", "data"),
                        fontsize=7, color="dimgrey", ha="left", va="bottom")
