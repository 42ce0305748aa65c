"""Per-link utilization from ports.csv: each switch egress port's transmitted bits per second over its
link's rate (topology.json ``links[].rate_bps``), over time and averaged over the traffic."""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.report.data import lacking
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.portgrid import heatmap, port_grid
from testbed.results.rundir import RunDir


def utilization_plot(run: RunDir) -> Plot:
    """Heatmap of utilization (0..1) per switch egress port and time bin, with each port's mean beside it."""
    key, title = "link_utilization", "Link utilization per switch egress port"
    grid = port_grid(run, "tx_bytes", "rate")
    if grid is None:
        return absent(key, title, "no switch port counters: " + lacking(run, "ports", absent="the qdisc sampler did not run"))
    rates = np.array([run.port_links.get(p, ("", 0.0))[1] for p in grid.ports])
    if not (rates > 0).any():
        return absent(key, title, "no link rates (topology.json absent or without links)")
    util = grid.values * 8 / np.where(rates > 0, rates, np.nan)[:, None]
    fig = new_figure(11, 1.6 + 0.22 * len(grid.ports), left_in=1.3, right_in=0.9, wspace=0.04)
    ax, bar = fig.subplots(1, 2, sharey=True, width_ratios=[5, 1])
    img = heatmap(ax, grid, util, "viridis", vmin=0, vmax=1)
    ax.set_ylabel("switch egress port > next node")
    ax.set_title(title)
    fig.colorbar(img, ax=[ax, bar], label="utilization (tx bit/s / link rate)", pad=0.015, fraction=0.03)
    mean = pd.DataFrame(util).mean(axis=1).fillna(0).to_numpy()  # NaN bins skipped; a port without a rate: 0
    bar.barh(range(len(mean)), mean, color="tab:green")
    bar.set_xlim(0, 1)
    bar.set_xlabel("mean utilization")
    bar.grid(True, axis="x", alpha=0.3)
    return rendered(key, title, fig, "ports.csv tx_bytes growth per bin x 8 / the link's rate_bps "
                    "(topology.json); mean over the sampled span.")
