"""The ``congestion`` block's figures from a pattern run's flows: fairness, bottleneck, CNPs, victim dip.

Read after the pattern results are written (fct.csv, flow_rates.csv: testbed.workloads.pattern.results), with
lossless_queues.csv (the congestion loop's per-port samples of the lossless class), qps.csv,
qp_rates.csv and topology.json. Definitions:

- steady window ("after convergence") of a trial: the flows that start with the trial (within
  ``START_SLACK_NS`` of the first post) all send from the last of their posts to the first of their
  ends; the window is that interval without its first ``SETTLE_FRACTION`` (the start-up and the
  control loop's first cuts). Every steady figure is taken over this window; null when it is shorter
  than ``MIN_STEADY_NS`` (two rate bins).
- ``jain_index``: Jain's index (sum x)^2 / (n sum x^2) (Jain, Chiu & Hawe, DEC-TR-301, 1984) of those
  flows' goodputs (flow_rates.csv bytes in the window over its length); 1 is even.
- bottleneck port: the switch port whose lossless-class backlog has the highest p99 in the window;
  ``bottleneck_util`` = the wire bytes it sent in the window x 8 / (its link rate x window length);
  ``queue_p99_bytes``: p99 of its lossless backlog in the window.
- ``cnp_sent`` / ``cnp_received``: qps.csv's ``cnps_tx`` (responders, the notification points) and
  ``cnps_rx`` (requesters); ``cnp_min_gap_ms``: shortest interval between two CNPs to one requester
  QP as its reaction point logged them (qp_rates.csv ``cnp`` rows; reverse-path jitter included);
  ``cnp_per_interval_max``: the most CNPs any responder QP sent per CNP interval of its active time
  (cnps_tx x N / the QP's busy span; <= 1 means paced).
- ``victim`` (flows patterns with a burst: flows posted later than ``START_SLACK_NS`` after the first):
  a victim is a flow that started with the trial and whose receiver gets no burst flow. Its
  goodput, smoothed over ``SMOOTH_BINS`` rate bins, against its mean over the ``BASELINE_NS`` before
  the burst, from the burst's first post to the victim's own end (less its last ``SMOOTH_BINS``
  bins, which hold its tail): ``dip_depth`` = 1 - min / baseline, ``dip_duration_s`` = time below
  ``DIP_LEVEL`` x baseline. The span ends with the victim, not with the burst, so a victim still
  held down after the burst (a congestion control slow to recover) counts, and runs whose bursts
  last differently are measured alike.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed.results.rundir import RunDir

START_SLACK_NS = 50_000_000
SETTLE_FRACTION = 1 / 3
MIN_STEADY_NS = 20_000_000
SMOOTH_BINS = 5
BASELINE_NS = 300_000_000
DIP_LEVEL = 0.5


def jain(values) -> float | None:
    """Jain's fairness index of non-negative values (None for none or all zero)."""
    x = np.asarray(list(values), dtype=float)
    if len(x) == 0 or (x ** 2).sum() == 0:
        return None
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def steady_window(fct: pd.DataFrame) -> tuple[int, int] | None:
    """(start_ns, end_ns) of one trial's steady window (module docstring), or None when too short."""
    first = fct["start_ns"].min()
    opening = fct[fct["start_ns"] <= first + START_SLACK_NS]
    if len(opening) < 2:
        return None
    t0, t1 = int(opening["start_ns"].max()), int(opening["end_ns"].min())
    t0 += int((t1 - t0) * SETTLE_FRACTION)
    return (t0, t1) if t1 - t0 >= MIN_STEADY_NS else None


def _link_rates(topology: dict) -> dict[str, float]:
    """Switch port name -> link rate, bit/s (``<switch>-eth<port>``)."""
    rates = {}
    for link in topology["links"]:
        for end in ("a", "b"):
            rates[f"{link[end]}-eth{link[end + '_port']}"] = float(link["rate_bps"])
    return rates


def _steady(run_dir: Path, fct: pd.DataFrame, rates: pd.DataFrame, queues: pd.DataFrame | None,
            link_bps: dict) -> dict | None:
    win = steady_window(fct)
    if win is None:
        return None
    t0, t1 = win
    flows = fct[fct["start_ns"] <= fct["start_ns"].min() + START_SLACK_NS]["flow"]
    r = rates[rates["flow"].isin(flows) & (rates["bin_start_ns"] >= t0) & (rates["bin_start_ns"] < t1)]
    goodput = r.groupby("flow")["rx_bytes"].sum().reindex(flows, fill_value=0) * 8 / ((t1 - t0) / 1e9)
    out = {"steady_start_ns": t0, "steady_s": round((t1 - t0) / 1e9, 3), "jain_index": jain(goodput),
           "steady_goodput_bps": {str(f): round(float(v)) for f, v in goodput.items()}}
    if queues is not None and len(queues):
        q = queues[(queues["time_ns"] >= t0) & (queues["time_ns"] <= t1)]
        p99 = q.groupby("port")["backlog_bytes"].quantile(0.99)
        if len(p99):
            port = str(p99.idxmax())
            mine = q[q["port"] == port].sort_values("time_ns")
            span_s = (mine["time_ns"].iloc[-1] - mine["time_ns"].iloc[0]) / 1e9
            sent_bits = (mine["tx_bytes"].iloc[-1] - mine["tx_bytes"].iloc[0]) * 8
            bps = link_bps.get(port)
            out.update({"bottleneck_port": port, "queue_p99_bytes": round(float(p99.max())),
                        "bottleneck_util": (round(sent_bits / (bps * span_s), 4) if bps and span_s > 0 else None)})
    return out


def _cnps(run: RunDir, cnp_interval_us: float | None) -> dict:
    qps = run.table("qps")
    if qps is None or "cnps_tx" not in qps:
        return {}
    resp = qps[qps["role"] == "responder"]
    out = {"cnp_sent": int(resp["cnps_tx"].fillna(0).sum()),
           "cnp_received": int(qps.loc[qps["role"] == "requester", "cnps_rx"].fillna(0).sum())}
    cnp = run.table("qp_rates")
    if cnp is not None:
        cnp = cnp[cnp["event"] == "cnp"].sort_values("time_ns")
        qp_keys = ["trial", "rank", "peer"] + (["channel"] if "channel" in cnp else [])  # one requester QP
        gaps = cnp.groupby(qp_keys)["time_ns"].diff().dropna()
        out["cnp_min_gap_ms"] = round(float(gaps.min()) / 1e6, 3) if len(gaps) else None
    if cnp_interval_us and "tx_busy_ns" in qps:
        # a responder's active span: its requester peer's busy time (the data it was sent)
        ch = ["channel"] if "channel" in qps else []  # a flow over several QPs: match each QP's own peer
        req = qps[qps["role"] == "requester"].set_index(["trial", "peer", "rank"] + ch)["tx_busy_ns"]
        per = []
        for _, row in resp.iterrows():
            busy = req.get((row["trial"], row["rank"], row["peer"]) + tuple(row[c] for c in ch))
            if busy and row["cnps_tx"] > 0:
                per.append(row["cnps_tx"] * cnp_interval_us * 1e3 / busy)
        out["cnp_per_interval_max"] = round(max(per), 3) if per else None
    return out


def victim_dip(fct: pd.DataFrame, rates: pd.DataFrame) -> list[dict]:
    """One row per victim flow of one trial (module docstring); [] without a burst or a victim."""
    first = fct["start_ns"].min()
    opening = fct[fct["start_ns"] <= first + START_SLACK_NS]
    burst = fct[fct["start_ns"] > first + START_SLACK_NS]
    if burst.empty:
        return []
    b0, b1 = int(burst["start_ns"].min()), int(burst["end_ns"].max())
    rows = []
    for _, f in opening[~opening["dst"].isin(set(burst["dst"]))].iterrows():
        r = rates[rates["flow"] == f["flow"]].sort_values("bin_start_ns")
        if len(r) < 2:
            continue
        bin_ns = float(r["bin_start_ns"].diff().median())
        smooth = (r["rx_bytes"] * 8 / (bin_ns / 1e9)).rolling(SMOOTH_BINS, min_periods=1).mean()
        t = r["bin_start_ns"]
        base = smooth[(t >= b0 - BASELINE_NS) & (t < b0)]
        during = smooth[(t >= b0) & (t <= t.iloc[-1] - SMOOTH_BINS * bin_ns)]
        if base.empty or during.empty or base.mean() <= 0:
            continue
        baseline = float(base.mean())
        rows.append({"flow": int(f["flow"]), "src": f["src"], "dst": f["dst"],
                     "baseline_bps": round(baseline), "min_bps": round(float(during.min())),
                     "dip_depth": round(1 - float(during.min()) / baseline, 4),
                     "dip_duration_s": round(float((during < DIP_LEVEL * baseline).sum()) * bin_ns / 1e9, 3),
                     "burst_start_ns": b0, "burst_s": round((b1 - b0) / 1e9, 3)})
    return rows


def flow_figures(run_dir: Path, cnp_interval_us: float | None = None) -> dict:
    """The figures above for a pattern run directory: keys ``jain_index``, ``bottleneck_util``,
    ``bottleneck_port``, ``queue_p99_bytes``, ``steady_s``, ``steady_goodput_bps`` (of the worst
    trial: lowest Jain), ``cnp_*`` and ``victim`` (list, one row per trial and victim flow; absent
    without a burst). Missing files give no keys."""
    run_dir = Path(run_dir)
    run = RunDir(run_dir)
    out = _cnps(run, cnp_interval_us)
    fct, rates = run.table("fct"), run.table("flow_rates")
    if fct is None or rates is None:
        return out
    queues = run.table("lossless_queues")
    link_bps = _link_rates(run.topology) if run.topology else {}
    steady, victims = [], []
    for trial, f in fct.groupby("trial"):
        r = rates[rates["trial"] == trial]
        s = _steady(run_dir, f, r, queues, link_bps)
        if s is not None:
            steady.append(s)
        victims += [{"trial": int(trial), **v} for v in victim_dip(f, r)]
    if steady:
        out.update(min(steady, key=lambda s: s["jain_index"] if s["jain_index"] is not None else 2))
    if victims:
        out["victim"] = victims
    return out
