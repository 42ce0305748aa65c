"""Per-QP rate over time, from the best table the run has:

1. ``qp_rates.csv`` (a rate-changing congestion control, DCQCN): each
   requester QP's current rate RC after every change (start, cnp, alpha_timer,
   timer, bytes events), drawn as steps;
2. ``flow_rates.csv`` (traffic patterns): each flow's receiver goodput per
   bin (one flow is one QP);
3. ``msgs.csv`` (every run with agents): each message's size over its
   service time (from the later of its post and the QP's previous ACK to
   its own last ACK: a QP serves its messages in order).

The y axis stops at 1.5 x the host link rate (summary.json) when a few
short messages (sent from the shaper's burst allowance) would squash the rest.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.report.data import rows, t_s, host_name
from testbed.results.rundir import RunDir

#: most QPs drawn as their own line (the rest are summarised in the caption)
MAX_QPS = 16


def qp_rate_plot(run: RunDir) -> Plot:
    """Rate (Mbit/s) per QP over time."""
    key, title = "qp_rates", "Per-QP rate over time"
    rates, flows, msgs = rows(run, "qp_rates"), rows(run, "flow_rates"), rows(run, "msgs")
    if rates is not None and "event" in rates:
        rates = rates[rates.groupby(_qp_keys(rates))["event"].transform(lambda e: (e != "start").any())]
    if rates is not None and len(rates):
        keys = _qp_keys(rates)
        series = [(k, d["time_ns"], d["rate_bps"], None) for k, d in rates.sort_values("time_ns").groupby(keys)]
        ylabel, src = "sending rate RC (Mbit/s)", "qp_rates.csv rate_bps (DCQCN's current rate after each change; " \
            "QPs that never changed it are left out)"
    elif flows is not None:
        keys = _qp_keys(flows, "src", "dst")
        series = [(k, d["bin_start_ns"], d["goodput_bps"], False) for k, d in
                  flows.sort_values("bin_start_ns").groupby(keys)]
        ylabel, src = "receiver goodput (Mbit/s)", "flow_rates.csv goodput_bps per bin"
    elif msgs is not None and {"t_post_ns", "t_acked_ns"} <= set(msgs):
        keys = _qp_keys(msgs)
        series = _service_rates(msgs, keys)
        ylabel, src = "message rate (Mbit/s)", "msgs.csv: each message's size_bytes x 8 over its service time " \
            "(from the later of its post and the QP's previous ACK to its last ACK), one segment per message"
    else:
        return absent(key, title, "no QP records (qp_rates.csv, flow_rates.csv and msgs.csv are absent)")
    series.sort(key=lambda s: -float(s[2].mean()) if len(s[2]) else 0)  # busiest first
    fig = new_figure(10, 4.4)
    ax = fig.add_subplot()
    for n, (k, t_ns, v, end) in enumerate(series[:MAX_QPS]):
        t, mbps, label = t_s(run, t_ns).to_numpy(), v.to_numpy(float) / 1e6, _label(run, keys, k)
        if end is None:  # a rate holding until its next change
            ax.step(t, mbps, where="post", linewidth=1, label=label)
        elif end is False:  # one value per bin
            ax.plot(t, mbps, linewidth=1, label=label)
        else:  # one segment per message
            ax.hlines(mbps, t, t_s(run, end).to_numpy(), colors=f"C{n % 10}", linewidth=1.5, label=label)
    ax.set_xlabel("time since the first traffic (s)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    link = run.summary.get("host_link_bps")
    cut = ""
    if link and ax.get_ylim()[1] > 1.5 * link / 1e6:
        ax.set_ylim(top=1.5 * link / 1e6)
        cut = f"; y axis cut at 1.5 x the host link rate ({1.5 * link / 1e6:g} Mbit/s)"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper right", ncol=4, title="QP: sender > receiver", title_fontsize="x-small")
    more = f"; the {MAX_QPS} QPs with the highest mean of {len(series)}" if len(series) > MAX_QPS else ""
    return rendered(key, title, fig, f"{src}{more}{cut}.")


def _service_rates(msgs: pd.DataFrame, keys: list[str]):
    """[(qp key, start ns, bit/s, end ns)] per message: its size x 8 over its service time, from the later of
    its post and the QP's previous ACK to its own last ACK (a QP serves its messages in order)."""
    m = msgs.dropna(subset=["t_acked_ns"])
    m = m[m["t_acked_ns"] > 0].sort_values("t_acked_ns")
    out = []
    for k, d in m.groupby(keys):
        end = d["t_acked_ns"].to_numpy(float)
        start = np.maximum(d["t_post_ns"].to_numpy(float), np.r_[-np.inf, end[:-1]])
        ok = end > start
        bps = d["size_bytes"].to_numpy(float)[ok] * 8 / ((end[ok] - start[ok]) / 1e9)
        out.append((k, pd.Series(start[ok]), pd.Series(bps), pd.Series(end[ok])))
    return out


def _qp_keys(df, a: str = "rank", b: str = "peer") -> list[str]:
    """The columns naming one QP: sender and receiver, with the trial and channel when the run has several."""
    keys = [a, b]
    if "trial" in df and df["trial"].nunique() > 1:
        keys.insert(0, "trial")
    if "channel" in df and df["channel"].nunique() > 1:
        keys.append("channel")
    return keys


def _label(run: RunDir, keys: list[str], values) -> str:
    """``h3 > h1`` (ranks as host names), then ``(trial 1, channel 0)`` when those tell QPs apart."""
    v = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
    ends = [v[k] if isinstance(v[k], str) else host_name(run, v[k]) for k in keys if k not in ("trial", "channel")]
    extra = ", ".join(f"{k} {v[k]}" for k in ("trial", "channel") if k in v)
    return " > ".join(ends) + (f" ({extra})" if extra else "")
