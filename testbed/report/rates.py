"""Per-QP rate over time, from the best table the run has:

1. ``qp_rates.csv`` (a rate-changing congestion control, DCQCN): each
   requester QP's current rate RC after every change (start, cnp, alpha_timer,
   timer, bytes events), drawn as steps;
2. ``flow_rates.csv`` (traffic patterns): each flow's receiver goodput per
   bin (one flow is one QP);
3. ``msgs.csv`` (every run with agents): each message's size over its
   service time (from the later of its post and the QP's previous ACK to
   its own last ACK: a QP serves its messages in order).

Values above 1.5 x the host link rate (summary.json: a few short messages
sent from the shaper's burst allowance) are drawn at that level, so they do
not squash the rest; the caption counts them. The flows a lab asks about
(named in the scenario, or the run's measured victims) are drawn in colour
with their names, the others thin and grey, so a victim's dip is not lost in
the tangle of the rest.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.report.data import host_name, lacking, rows, t_s
from testbed.report.extent import fit_y
from testbed.report.figure import Plot, absent, new_figure, rendered
from testbed.results.congestion_flows import SMOOTH_BINS
from testbed.results.rundir import RunDir

#: most QPs drawn thin and grey beside the highlighted ones (the rest are counted in the caption)
MAX_QPS = 32
#: with no flow named, every QP is drawn in colour up to this many; above it the fastest and the slowest
MAX_COLOURED = 8


def watched_flows(run: RunDir) -> dict[tuple[str, str], str]:
    """(sender, receiver) host names -> name of each flow a lab asks about: the flows the scenario names
    (``workload.pattern.flows[].name``, manifest.json) and the victims the run measured (summary.json
    ``congestion.victim``, testbed.results.congestion_flows), named ``victim`` unless the scenario names them."""
    pattern = ((run.manifest.get("scenario") or {}).get("workload") or {}).get("pattern") or {}
    out = {}
    for v in (run.summary.get("congestion") or {}).get("victim") or ():
        out[(_host(run, v["src"]), _host(run, v["dst"]))] = "victim"
    for f in pattern.get("flows") or ():
        if f.get("name"):
            out[(_host(run, f["src"]), _host(run, f["dst"]))] = f["name"]
    return out


def _host(run: RunDir, ref) -> str:
    """A scenario's host reference (``h3``, or a rank) as a host name without the run id."""
    return ref if isinstance(ref, str) else host_name(run, ref)


def qp_rate_plot(run: RunDir) -> Plot:
    """Rate (Mbit/s) per QP over time; the flows a lab asks about (:func:`watched_flows`) in colour, the
    others thin and grey (all in colour when nothing is named and there are at most :data:`MAX_COLOURED`)."""
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
        series = [(k, d["bin_start_ns"], d["goodput_bps"].rolling(SMOOTH_BINS, min_periods=1).mean(), False)
                  for k, d in flows.sort_values("bin_start_ns").groupby(keys)]
        ylabel, src = f"receiver goodput, mean of {SMOOTH_BINS} bins (Mbit/s)", f"flow_rates.csv goodput_bps, " \
            f"mean of the last {SMOOTH_BINS} bins (as summary.json congestion.victim measures a dip)"
    elif msgs is not None and {"t_post_ns", "t_acked_ns"} <= set(msgs):
        keys = _qp_keys(msgs)
        series = _service_rates(msgs, keys)
        ylabel, src = "message rate (Mbit/s)", "msgs.csv: each message's size_bytes x 8 over its service time " \
            "(from the later of its post and the QP's previous ACK to its last ACK), one segment per message"
    else:
        return absent(key, title, "no QP records: " + "; ".join(
            lacking(run, n) for n in ("qp_rates", "flow_rates", "msgs")))
    series.sort(key=lambda s: -float(s[2].mean()) if len(s[2]) else 0)  # busiest first
    names = watched_flows(run)
    ends = [_ends(run, keys, s[0]) for s in series]
    if any(e in names for e in ends):
        lit = [e in names for e in ends]
    elif len(series) <= MAX_COLOURED:
        lit = [True] * len(series)
    else:  # nothing named (or nothing named was recorded): the fastest and the slowest QP
        lit = [i in (0, len(series) - 1) for i in range(len(series))]
        names = {ends[0]: "fastest", ends[-1]: "slowest"}
    order = [i for i in range(len(series)) if lit[i]] + [i for i in range(len(series)) if not lit[i]][:MAX_QPS]
    link = run.summary.get("host_link_bps")
    cap = 1.5 * link / 1e6 if link else np.inf
    fig = new_figure(10, 4.4)
    ax = fig.add_subplot()
    n_cut, colour = 0, 0
    for i in order:
        k, t_ns, v, end = series[i]
        t, mbps, label = t_s(run, t_ns).to_numpy(), v.to_numpy(float) / 1e6, _label(run, keys, k)
        n_cut += int((mbps > cap).sum())
        mbps = np.minimum(mbps, cap)  # drawn at the cut, said in the caption
        if lit[i]:
            style = {"color": f"C{colour % 10}", "linewidth": 1.6, "zorder": 3,
                     "label": f"{names[ends[i]]}: {label}" if ends[i] in names else label}
            colour += 1
        else:  # a label starting with "_" stays out of the legend
            style = {"color": "0.65", "linewidth": 0.7, "alpha": 0.8, "zorder": 2, "label": f"_{label}"}
        if end is None:  # a rate holding until its next change
            ax.step(t, mbps, where="post", **style)
        elif end is False:  # one value per bin
            ax.plot(t, mbps, **style)
        else:  # one segment per message
            style["colors"] = style.pop("color")
            ax.hlines(mbps, t, t_s(run, end).to_numpy(), **style)
    ax.set_xlabel("time since the first traffic (s)")
    ax.set_ylabel(ylabel)
    fit_y(ax)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small", loc="upper right", ncol=4, title="QP: sender > receiver",
                  title_fontsize="x-small")
    grey = len(series) - sum(lit)
    notes = [src]
    if grey:
        notes.append(f"grey: {min(grey, MAX_QPS)} other QPs" + (f" (the busiest of {grey})" if grey > MAX_QPS else ""))
    if n_cut:
        notes.append(f"{n_cut} values above 1.5 x the host link rate ({cap:g} Mbit/s) drawn at {cap:g}")
    return rendered(key, title, fig, "; ".join(notes) + ".")


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


def _ends(run: RunDir, keys: list[str], values) -> tuple[str, str]:
    """(sender, receiver) host names of one QP key."""
    v = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
    a, b = [_host(run, v[k]) for k in keys if k not in ("trial", "channel")]
    return a, b


def _label(run: RunDir, keys: list[str], values) -> str:
    """``h3 > h1`` (ranks as host names), then ``(trial 1, channel 0)`` when those tell QPs apart."""
    v = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
    ends = _ends(run, keys, values)
    extra = ", ".join(f"{k} {v[k]}" for k in ("trial", "channel") if k in v)
    return " > ".join(ends) + (f" ({extra})" if extra else "")
