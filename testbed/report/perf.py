"""Performance plots: busbw against size (sizes.csv) and the latency CDF per size (ops.csv or fct.csv).

busbw and busbw/link are nccl-tests' (testbed.results.tables); the dashed line
is the link's goodput (host link rate x payload efficiency, summary.json),
the busbw a ring at line rate reaches. Latency: each timed operation's span
(``ops.time_us``, first rank's start to last rank's end) for collectives;
each flow's completion time (``fct.fct_us``) for traffic patterns, per size bucket of slowdown.csv for
open-loop flows (each of its own size).
"""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter

from testbed.report.extent import fit_y
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.data import lacking, rows
from testbed.results.rundir import RunDir


def human_size(n: float) -> str:
    """``65536`` -> ``64 KiB`` (binary units, as nccl-tests sizes are)."""
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            v = n / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{int(n)} B"


def busbw_plot(run: RunDir) -> Plot:
    """busbw (Mbit/s) against message size, one line per collective/algorithm/group size."""
    key, title = "busbw", "Bus bandwidth against message size"
    sizes = rows(run, "sizes")
    if sizes is None:
        why = ("this run sends flows (workload.pattern), not collectives" if rows(run, "fct") is not None
               else "no busbw per size: " + lacking(run, "sizes", absent="no collective was timed",
                                                    empty="no timed collective finished"))
        return absent(key, title, why)
    fig = new_figure(10, 4.2)
    ax = fig.add_subplot()
    for (coll, alg, g), df in sizes.groupby(["collective", "algorithm", "group_size"]):
        df = df.sort_values("size_bytes")
        ax.plot(df["size_bytes"], df["busbw_bps"] / 1e6, marker="o", label=f"{coll} {alg}, {g} ranks")
    goodput = _goodput_bps(run)
    if goodput:
        ax.axhline(goodput / 1e6, color="grey", linestyle="--", label=f"link goodput {goodput / 1e6:.2f} Mbit/s")
    ax.set_xscale("log", base=2)
    xs = sorted(sizes["size_bytes"].unique())
    ax.set_xticks(xs, [human_size(x) for x in xs])
    ax.set_xlabel("message size (bytes, log scale)")
    ax.set_ylabel("busbw (Mbit/s)")
    fit_y(ax)  # from 0 to above both the data and the goodput line
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return rendered(key, title, fig, "sizes.csv: busbw_bps per size (nccl-tests' bus bandwidth: algbw x the "
                    "algorithm's factor); dashed: host link rate x payload efficiency.")


def _goodput_bps(run: RunDir) -> float | None:
    s = run.summary
    if s.get("host_link_bps") and s.get("payload_efficiency"):
        return float(s["host_link_bps"]) * float(s["payload_efficiency"])
    return None


def latency_cdf_plot(run: RunDir) -> Plot:
    """Empirical CDF of each size's operation times (collectives) or flow completion times (patterns)."""
    key, title = "latency_cdf", "Latency CDF per size"
    ops, fct = rows(run, "ops"), rows(run, "fct")
    if ops is not None and "warmup" in ops:
        ops = ops[~ops["warmup"].astype(bool)]
    if ops is not None and len(ops):
        samples, what, src = ops[["size_bytes", "time_us"]], "collective time", "ops.csv time_us (timed ops)"
    elif fct is not None and "fct_us" in fct:
        samples, what, src = fct[["size_bytes", "fct_us"]].rename(columns={"fct_us": "time_us"}), \
            "flow completion time", "fct.csv fct_us"
    else:
        return absent(key, title, "no timed collective and no completed flow: " + "; ".join(
            lacking(run, n) or f"{n}.csv has no timed rows" for n in ("ops", "fct")))
    samples = samples.dropna()
    fig = new_figure(10, 4.2)
    ax = fig.add_subplot()
    for label, df in _size_groups(run, samples):
        t_ms = np.sort(df["time_us"].to_numpy(float)) / 1e3
        p = np.arange(1, len(t_ms) + 1) / len(t_ms)
        ax.step(np.r_[t_ms[0], t_ms], np.r_[0, p], where="post", marker=".", label=f"{label} (n={len(t_ms)})")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # labels on decades only (and far cheaper to draw)
    ax.set_xlabel(f"{what} (ms, log scale)")
    ax.set_ylabel("fraction of samples <= x")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(title="size", loc="lower right", fontsize="small", ncol=2)
    return rendered(key, title, fig, f"{src}: empirical CDF per size (nearest-rank: each step is one sample).")


def _size_groups(run: RunDir, samples):
    """(label, rows) per size of ``samples``; an open-loop run's flows (each its own size) per size bucket of
    its slowdown.csv instead."""
    buckets = rows(run, "slowdown")
    if buckets is None:
        return [(human_size(size), df) for size, df in samples.groupby("size_bytes")]
    out = []
    for lo, hi in zip(buckets["size_lo_bytes"], buckets["size_hi_bytes"]):
        df = samples[(samples["size_bytes"] >= lo) & (samples["size_bytes"] <= hi)]
        if len(df):
            out.append((f"{human_size(lo)}-{human_size(hi)}", df))
    return out
