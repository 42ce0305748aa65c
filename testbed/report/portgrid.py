"""Switch port samples (ports.csv) as a ports x time grid, for the heatmaps of testbed.report."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from testbed.report.figure import time_bins
from testbed.report.data import rows, t_s, port_label, port_sort_key
from testbed.results.rundir import RunDir


@dataclass(frozen=True)
class PortGrid:
    """``values[i, j]``: port ``ports[i]`` in time bin j (``edges`` in s since the first traffic).

    ``ports``: the switch port names as in ports.csv; ``labels``: the same without the run id, with
    the node each port leads to (``l1-eth3 > s1``).
    """
    ports: list[str]
    labels: list[str]
    edges: np.ndarray
    values: np.ndarray


def port_grid(run: RunDir, column: str, how: str, max_bins: int = 400) -> PortGrid | None:
    """ports.csv's ``column`` per port and time bin: ``how`` = ``max`` (the largest sample in each bin) or
    ``rate`` (the growth of a counter over each bin, per second; empty bins share the next one's growth).

    None when ports.csv is absent or lacks ``column``. Raises ValueError for another ``how``.
    """
    if how not in ("max", "rate"):
        raise ValueError(f"how={how!r}: allowed max, rate")
    df = rows(run, "ports")
    if df is None or column not in df or "port" not in df:
        return None
    t = t_s(run, df["time_ns"]).to_numpy()
    edges = time_bins(t, max_bins)
    n = len(edges) - 1
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    g = pd.DataFrame({"port": df["port"].to_numpy(), "bin": b, "v": df[column].to_numpy(float)})
    wide = g.groupby(["port", "bin"])["v"].max().unstack("bin").reindex(columns=range(n))
    labels = {p: port_label(run, p) for p in wide.index}
    order = sorted(wide.index, key=lambda p: port_sort_key(labels[p]))
    wide = wide.loc[order]
    if how == "max":
        values = wide.to_numpy()
    else:
        last = wide.ffill(axis=1).fillna(0.0).to_numpy()   # counter at the end of each bin
        grown = np.diff(np.concatenate([last[:, :1], last], axis=1), axis=1).clip(min=0)
        values = grown / np.diff(edges)[None, :]
        values[:, 0] = np.nan  # the first bin has no earlier sample to grow from
    return PortGrid(order, [labels[p] for p in order], edges, values)


def heatmap(ax, grid: PortGrid, values: np.ndarray, cmap: str, vmin=None, vmax=None):
    """Draw ``values`` (ports x bins of ``grid``) on ``ax`` with port labels; return the image."""
    img = ax.imshow(values, aspect="auto", interpolation="nearest", cmap=cmap, vmin=vmin, vmax=vmax,
                    extent=(grid.edges[0], grid.edges[-1], len(grid.ports) - 0.5, -0.5))
    ax.set_yticks(range(len(grid.labels)), grid.labels, fontsize=7 if len(grid.labels) > 24 else 8)
    ax.set_xlabel("time since the first traffic (s)")
    return img
