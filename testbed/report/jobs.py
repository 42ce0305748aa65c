"""A jobs run's timeline (which job's traffic was on which link when) and its interference matrix.

Timeline: each job's operations as bars on one time axis (ops.csv: ``group`` is the job's name in a
jobs run), above the utilization of every switch egress port any job's paths cross (ports.csv tx_bytes
growth per bin / link rate), each port labelled with the jobs that may cross it (summary.json
``jobs.jobs[].links``, testbed.workloads.jobs.links): a port labelled with two jobs that is busy while both jobs'
bars overlap is where they met. Matrix: summary.json ``jobs.interference`` (``testbed run --solo``), an HTML
table with cells coloured by slowdown and text readable on each (testbed.report.matrix).
"""
from __future__ import annotations

import numpy as np

from testbed.report.data import lacking, rows, short_name, t_s
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.matrix import matrix_html
from testbed.report.portgrid import heatmap, port_grid
from testbed.results.rundir import RunDir

_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def _block(run: RunDir) -> dict | None:
    try:
        return run.summary.get("jobs")
    except Exception:  # noqa: BLE001  no summary: not a jobs run as far as the report can tell
        return None


def jobs_timeline_plot(run: RunDir) -> Plot:
    """Job op spans over time above the utilization of the switch ports the jobs' paths cross."""
    key, title = "jobs_timeline", "Jobs: operations over time and the links they cross"
    block = _block(run)
    if not block:
        return absent(key, title, "a single workload (no jobs list)")
    ops = rows(run, "ops")
    if ops is None:
        return absent(key, title, "no operations finished: " + lacking(run, "ops"))
    names = [e["name"] for e in block["jobs"]]
    users: dict[str, list[str]] = {}
    for e in block["jobs"]:
        for link in e.get("links", []):
            users.setdefault(link, []).append(e["name"])
    grid = port_grid(run, "tx_bytes", "rate")
    keep = []
    if grid is not None:
        for i, p in enumerate(grid.ports):
            peer = run.port_links.get(p)
            link = f"{short_name(run, p.rsplit('-eth', 1)[0])}>{short_name(run, peer[0])}" if peer else ""
            if link in users:
                keep.append((i, f"{grid.labels[i]} [{','.join(users[link])}]", peer[1]))
    height = 1.2 + 0.35 * len(names) + 0.2 * len(keep)
    fig = new_figure(11, max(3.0, height + 1.0), left_in=2.2, right_in=0.9, hspace=0.25)
    if keep:
        ax, ax2 = fig.subplots(2, 1, sharex=True,
                               height_ratios=[max(1, len(names)), max(2, 0.6 * len(keep))])
    else:
        ax, ax2 = fig.subplots(1, 1), None
    t0, t1 = t_s(run, ops["t_start_ns"]).to_numpy(), t_s(run, ops["t_end_ns"]).to_numpy()
    for y, name in enumerate(names):
        m = (ops["job" if "job" in ops else "group"] == name).to_numpy()
        ax.broken_barh(list(zip(t0[m], t1[m] - t0[m])), (y - 0.35, 0.7), color=_COLORS[y % len(_COLORS)],
                       edgecolor="white", linewidth=0.8)  # one bar per op
    ax.set_yticks(range(len(names)), [f"job {n}" for n in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title)
    if ax2 is not None:
        idx = [i for i, _, _ in keep]
        rates = np.array([r for _, _, r in keep], dtype=float)
        util = grid.values[idx] * 8 / np.where(rates > 0, rates, np.nan)[:, None]
        sub = type(grid)([grid.ports[i] for i in idx], [lab for _, lab, _ in keep], grid.edges, util)
        img = heatmap(ax2, sub, util, "viridis", vmin=0, vmax=1)
        ax2.set_ylabel("switch egress port [jobs]")
        fig.colorbar(img, ax=[ax, ax2], label="utilization", pad=0.015, fraction=0.03)
    else:
        ax.set_xlabel("time since the first traffic (s)")
    shared = len(block.get("shared_links") or {})
    return rendered(key, title, fig, f"ops.csv spans per job; ports.csv tx_bytes growth x 8 / link "
                    f"rate for the switch ports the jobs' shortest paths cross (testbed.workloads.jobs.links); {shared} "
                    f"links may carry two or more jobs.")


def interference_plot(run: RunDir) -> Plot:
    """The interference matrix of a ``--solo`` run: JCT slowdown of the row's job with the column's job."""
    key, title = "jobs_interference", "Jobs: interference matrix (JCT slowdown)"
    block = _block(run)
    m = (block or {}).get("interference")
    if not m:
        return absent(key, title, "no solo baselines (testbed run --solo on a jobs scenario)")
    names = m["jobs"]
    vals = np.array([[np.nan if v is None else v for v in row] for row in m["jct_slowdown"]], dtype=float)
    vmax = max(2.0, float(np.nanmax(vals)))
    table = matrix_html(names, names, vals, cmap="Reds", vmin=1.0, vmax=vmax, corner="slowed job \\ run with job")
    return Plot(key, title, html=table, caption=f"JCT of the row's job run with the column's job / its solo JCT; "
                f"colour from 1.00 (white) to {vmax:.2f} (dark red), text black or white by the cell's luminance. "
                f"{m['method']} (testbed.workloads.jobs.solo).")
