"""Marks, CNPs, pauses and paused time on one shared time axis (the controller's congestion loop and DCQCN).

Sources: ``ecn_marking.csv`` (every change of a port's marking probability,
RED curve Kmin/Kmax/Pmax), ``qp_rates.csv`` rows with ``event == cnp`` (each
CNP a reaction point received), ``pfc_events.csv`` (pause/resume of a port's
lossless class). The run records no per-packet mark times; the total of
CE-marked packets (summary.json ``congestion.ce_marked_pkts``) is in the
marks panel's title. A panel whose table the run lacks is left out and named
below the figure.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.measure.pfc_paused import paused_windows
from testbed.report.figure import NOT_RECORDED, Plot, absent, new_figure, rendered
from testbed.report.data import host_name, lacking, port_label, rows, t_s
from testbed.results.rundir import RunDir

#: most ports drawn with their own marking-probability line
MARK_PORTS = 6


def congestion_plot(run: RunDir) -> Plot:
    """Up to four panels sharing the time axis: marking probability, CNPs, pause intervals, paused time."""
    key, title = "congestion", "ECN marks, CNPs, PFC pauses and paused time"
    marks, rates, pfc = rows(run, "ecn_marking"), rows(run, "qp_rates"), rows(run, "pfc_events")
    cnps = rates[rates["event"] == "cnp"] if rates is not None and "event" in rates else None
    pauses = pfc[pfc["event"].isin(["pause", "resume"])] if pfc is not None and "event" in pfc else None
    panels, missing = [], []
    for name, table, draw, src, off, none in (
            ("marks", marks, _marks, "ecn_marking", "no ECN marking: congestion.ecn off", "no port marked"),
            ("CNPs", cnps, _cnps, "qp_rates", "no DCQCN", "no CNP received (no mark reached a DCQCN sender)"),
            ("pauses", pauses, _pauses, "pfc_events", "no PFC: congestion.pfc off",
             "no PFC pause (no queue reached Xoff)")):
        if table is not None and len(table):
            panels.append((draw, table))
        else:
            missing.append(f"{name}: " + (lacking(run, src, absent=off) or f"{src}.csv: {none}"))
    if not panels:
        return absent(key, title, "no congestion handling recorded (" + "; ".join(missing) + ")")
    if pauses is not None and len(pauses):
        panels.append((_paused_time, pauses))
    end_s = _end_s(run)
    fig = new_figure(10.5, 1.0 + 2.0 * len(panels), left_in=1.6, top_in=0.6, hspace=0.45)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (draw, table) in zip(axes, panels):
        draw(ax, run, table, end_s)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time since the first traffic (s)")
    fig.suptitle(title)
    caption = "ecn_marking.csv, qp_rates.csv (event cnp), pfc_events.csv (pause/resume)."
    if missing:
        caption += " " + "; ".join(NOT_RECORDED + x for x in missing) + "."
    return rendered(key, title, fig, caption)


def _end_s(run: RunDir) -> float | None:
    ends = []
    for name, col in (("ops", "t_end_ns"), ("msgs", "t_acked_ns"), ("fct", "end_ns")):
        df = rows(run, name)
        if df is not None and col in df and df[col].notna().any():
            ends.append(df[col].max())
    return float(t_s(run, [max(ends)]).iloc[0]) if ends else None


def _marks(ax, run: RunDir, df: pd.DataFrame, end_s) -> None:
    df = df.assign(t_s=t_s(run, df["time_ns"]).to_numpy())
    mean = df.groupby("port")["probability"].mean().sort_values(ascending=False)
    for port in [p for p in mean.index[:MARK_PORTS] if mean[p] > 0]:
        d = df[df["port"] == port].sort_values("t_s")
        t, p = d["t_s"].to_numpy(), d["probability"].to_numpy()
        if end_s is not None and t[-1] < end_s:
            t, p = np.r_[t, end_s], np.r_[p, p[-1]]
        ax.step(t, p, where="post", linewidth=1, label=port_label(run, port))
    c = run.summary.get("congestion") or {}
    total = f": {c['ce_marked_pkts']} CE-marked of {c.get('ect_pkts', '?')} ECT packets" if c.get("ce_marked_pkts") is not None else ""
    ax.set_title(f"ECN marking probability per port{total}", fontsize="medium", loc="left")
    ax.set_ylabel("marking\nprobability")
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small", loc="upper right", ncol=2)


def _cnps(ax, run: RunDir, df: pd.DataFrame, end_s) -> None:
    for (rank, peer), d in df.groupby(["rank", "peer"]):
        t = np.sort(t_s(run, d["time_ns"]).to_numpy())
        ax.step(np.r_[t[0], t], np.r_[0, np.arange(1, len(t) + 1)], where="post", linewidth=1,
                label=f"{host_name(run, rank)} > {host_name(run, peer)}")
    ax.set_title(f"CNPs received by the senders (reaction points): {len(df)} in all", fontsize="medium", loc="left")
    ax.set_ylabel("CNPs\n(cumulative)")
    ax.legend(fontsize="x-small", loc="upper left", ncol=4, title="QP", title_fontsize="x-small")


def _intervals(run: RunDir, end_s) -> dict[str, list[tuple[float, float]]]:
    """Paused egress port label -> [(start_s, duration_s)] of each pause (testbed.measure.pfc_paused: the
    port PFC gated, from pause/resume pairs); a pause never resumed lasts to the end of the traffic."""
    t0, never = float(run.t0_ns or 0), np.iinfo(np.int64).max
    out = {}
    for port, spans in sorted(paused_windows(run.path).items()):
        secs = [((a - t0) / 1e9, None if b == never else (b - t0) / 1e9) for a, b in spans]
        last = max([end_s or 0.0] + [a for a, _ in secs])
        out[port_label(run, port)] = [(a, (last if b is None else b) - a) for a, b in secs]
    return out


def paused_time_s(spans: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(times, paused seconds summed over ``spans`` up to each time): the integral of the number of
    ports paused at once; ``spans`` = [(start_s, duration_s)]."""
    if not spans:
        return np.zeros(0), np.zeros(0)
    edges = np.array([a for a, _ in spans] + [a + d for a, d in spans])
    step = np.array([1] * len(spans) + [-1] * len(spans))
    order = np.argsort(edges, kind="stable")
    t, paused_now = edges[order], np.cumsum(step[order])
    total = np.r_[0.0, np.cumsum(paused_now[:-1] * np.diff(t))]
    return t, total


def _pauses(ax, run: RunDir, df: pd.DataFrame, end_s) -> None:
    spans = _intervals(run, end_s)
    for i, (label, s) in enumerate(spans.items()):
        ax.broken_barh(s, (i - 0.4, 0.8), color="tab:red")
    ax.set_yticks(range(len(spans)), list(spans), fontsize="x-small")
    ax.set_ylim(len(spans) - 0.5, -0.5)
    n = int((df["event"] == "pause").sum())
    ax.set_title(f"PFC pauses per paused egress port (red: paused): {n} pauses", fontsize="medium", loc="left")


def _paused_time(ax, run: RunDir, df: pd.DataFrame, end_s) -> None:
    t, total = paused_time_s([x for s in _intervals(run, end_s).values() for x in s])
    if len(t) and end_s is not None and end_s > t[-1]:  # flat to the end of the traffic
        t, total = np.r_[t, end_s], np.r_[total, total[-1]]
    ax.plot(t, total, color="tab:red")
    total = total.tolist()
    ax.set_title(f"Paused time summed over ports: {total[-1] if total else 0:.3f} s", fontsize="medium", loc="left")
    ax.set_ylabel("paused time\n(s, cumulative)")
    ax.set_ylim(bottom=0)

