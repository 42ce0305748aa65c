"""The FCT slowdown plot of an open-loop run: p50, p95 and p99 of the slowdown per flow size bucket (slowdown.csv,
testbed.results.slowdown), each bucket labelled with its size range and its n, as the datacenter congestion
control papers draw it (HPCC, SIGCOMM 2019: slowdown against flow size)."""
from __future__ import annotations

import numpy as np

from testbed.report.data import lacking, rows
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.perf import human_size


def slowdown_plot(run) -> Plot:
    """Slowdown p50/p95/p99 (log scale) per size bucket of slowdown.csv; absent without its rows."""
    key, title = "slowdown", "FCT slowdown by flow size"
    table = rows(run, "slowdown")
    if table is None:
        return absent(key, title, lacking(run, "slowdown", absent="not an open-loop run (workload.open_loop)"))
    table = table[table["n"] > 0].sort_values("bucket")
    if table.empty:
        return absent(key, title, "no flow completed")
    x = np.arange(len(table))
    fig = new_figure(10, 4.2, bottom_in=0.9)
    ax = fig.add_subplot()
    for col, style in (("slowdown_p50", "o-"), ("slowdown_p95", "s--"), ("slowdown_p99", "^:")):
        ax.plot(x, table[col].astype(float), style, label=col.removeprefix("slowdown_"))
    ax.axhline(1, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{human_size(lo)}-{human_size(hi)}\nn={n}" for lo, hi, n in
                      zip(table["size_lo_bytes"], table["size_hi_bytes"], table["n"])], fontsize="small")
    ax.set_xlabel("flow size bucket (bytes, as run: scaled by workload.open_loop.size_scale)")
    ax.set_ylabel("FCT slowdown (log scale)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc="upper left")
    return rendered(key, title, fig, "slowdown.csv: per size bucket, nearest-rank percentiles of FCT / the FCT of "
                    "the flow alone on an idle path (fct.csv ideal_fct_us); n: the flows of the bucket.")
