"""Per-QP rate over time, from the best table the run has:

1. ``qp_rates.csv`` (a rate-changing congestion control, DCQCN): each
   requester QP's current rate RC after every change (start, cnp, timer,
   bytes events), drawn as steps;
2. ``flow_rates.csv`` (traffic patterns): each flow's receiver goodput per
   bin (one flow is one QP);
3. ``msgs.csv`` (every run with agents): the bytes of the messages each
   QP had acknowledged per time bin x 8 / the bin's width.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.report.data import RunData
from testbed.report.figure import Plot, absent, new_figure, rendered

#: most QPs drawn as their own line (the rest are summarised in the caption)
MAX_QPS = 16


def qp_rate_plot(run: RunData) -> Plot:
    """Rate (Mbit/s) per QP over time."""
    key, title = "qp_rates", "Per-QP rate over time"
    rates, flows, msgs = run.table("qp_rates"), run.table("flow_rates"), run.table("msgs")
    if rates is not None and "event" in rates:
        rates = rates[rates.groupby(_qp_keys(rates))["event"].transform(lambda e: (e != "start").any())]
    if rates is not None and len(rates):
        keys = _qp_keys(rates)
        series = [(k, d["time_ns"], d["rate_bps"]) for k, d in rates.sort_values("time_ns").groupby(keys)]
        ylabel, src, step = "sending rate RC (Mbit/s)", "qp_rates.csv rate_bps (DCQCN's current rate after " \
            "each change; QPs that never changed it are left out)", True
    elif flows is not None:
        keys = _qp_keys(flows, "src", "dst")
        series = [(k, d["bin_start_ns"], d["goodput_bps"]) for k, d in flows.sort_values("bin_start_ns").groupby(keys)]
        ylabel, src, step = "receiver goodput (Mbit/s)", "flow_rates.csv goodput_bps per bin", False
    elif msgs is not None and "t_acked_ns" in msgs:
        keys = _qp_keys(msgs)
        series, width_s = _acked_per_bin(run, msgs, keys)
        ylabel, src, step = "acknowledged bytes per bin x 8 (Mbit/s)", f"msgs.csv: bytes of the messages each " \
            f"QP had acknowledged in each {width_s * 1e3:.0f} ms bin (by t_acked_ns)", True
    else:
        return absent(key, title, "no QP records (qp_rates.csv, flow_rates.csv and msgs.csv are absent)")
    series.sort(key=lambda s: -float(s[2].mean()) if len(s[2]) else 0)
    fig = new_figure(10, 4.4)
    ax = fig.add_subplot()
    for k, t_ns, v in series[:MAX_QPS]:
        t, mbps = run.t_s(t_ns).to_numpy(), v.to_numpy(float) / 1e6
        if step:
            ax.step(t, mbps, where="post", linewidth=1, label=_label(run, keys, k))
        else:
            ax.plot(t, mbps, linewidth=1, label=_label(run, keys, k))
    ax.set_xlabel("time since the first traffic (s)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper right", ncol=4, title="QP: sender > receiver", title_fontsize="x-small")
    more = f"; the {MAX_QPS} QPs with the highest mean of {len(series)}" if len(series) > MAX_QPS else ""
    return rendered(key, title, fig, f"{src}{more}.")


def _acked_per_bin(run: RunData, msgs: pd.DataFrame, keys: list[str]):
    """[(qp key, bin start ns, bit/s)] of the bytes acknowledged per bin, and the bin width in s."""
    m = msgs.dropna(subset=["t_acked_ns"])
    m = m[m["t_acked_ns"] > 0]
    lo, hi = float(m["t_acked_ns"].min()), float(m["t_acked_ns"].max())
    width_ns = max((hi - lo) / 200, 1e8)
    edges = np.arange(lo, hi + width_ns, width_ns)
    m = m.assign(bin=((m["t_acked_ns"] - lo) // width_ns).astype(int))
    out = []
    for k, d in m.groupby(keys):
        acked = d.groupby("bin")["size_bytes"].sum().reindex(range(len(edges) - 1), fill_value=0)
        out.append((k, pd.Series(edges[:-1]), acked.reset_index(drop=True) * 8 / (width_ns / 1e9)))
    return out, width_ns / 1e9


def _qp_keys(df, a: str = "rank", b: str = "peer") -> list[str]:
    """The columns naming one QP: sender and receiver, with the trial and channel when the run has several."""
    keys = [a, b]
    if "trial" in df and df["trial"].nunique() > 1:
        keys.insert(0, "trial")
    if "channel" in df and df["channel"].nunique() > 1:
        keys.append("channel")
    return keys


def _label(run: RunData, keys: list[str], values) -> str:
    """``h3 > h1`` (ranks as host names), then ``(trial 1, channel 0)`` when those tell QPs apart."""
    v = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
    ends = [v[k] if isinstance(v[k], str) else run.host_name(v[k]) for k in keys if k not in ("trial", "channel")]
    extra = ", ".join(f"{k} {v[k]}" for k in ("trial", "channel") if k in v)
    return " > ".join(ends) + (f" ({extra})" if extra else "")
