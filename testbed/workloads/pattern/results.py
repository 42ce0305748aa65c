"""A pattern run's results: fct.csv, flow_rates.csv, uplinks.csv and summary.json's ``load_balance``.

Definitions (ideal: testbed.workloads.pattern.ideal, a perfectly balanced fluid fabric with max-min fair rates):

- ``fct_us``: the sender's time from posting a flow's message to the ACK of its last byte (msgs.csv's
  FCT); for a flow over several queue pairs (``qps``), from the first QP's post to the ACK of the last
  byte of the last QP; ``ideal_fct_us``: the same flow on the ideal fabric, with the pattern's other
  flows; ``slowdown`` = fct_us / ideal_fct_us (1 = as fast as perfect balancing allows).
- flow_qps.csv (only when a flow has ``qps`` > 1): one row per trial, flow and queue pair: its share of
  the bytes, its UDP source port (qps.csv), post, ACK, its own FCT and ``lost_pkts``; fct.csv's
  ``lost_pkts`` is their sum.
- ``throughput_ratio`` of a trial: the payload bytes every receiver got while ALL flows of the trial
  were sending (from the last flow's post, plus a tenth of the shortest ideal FCT for the start-up,
  to the first flow's last byte at its receiver), over what the flows' ideal max-min rates x payload
  efficiency deliver in that window; null when the window is shorter than two rate bins (flows that
  never all overlap). For k flows on k equal paths this is the share of the paths in use (balls
  into bins: 1 - (1 - 1/k)^k on average with random hashing).
- ``overlap_jain`` of a trial: Jain's fairness index (below) of the payload bytes each flow's receiver
  got in the window of ``throughput_ratio`` (every flow sending): 1 when the flows shared evenly; the
  block gives the mean and the minimum over trials. ``lost_pkts`` (fct.csv): the data packets a flow's
  sender put on the wire that its receiver never got (qps.csv: requester ``tx_pkts`` - responder
  ``rx_pkts``, summed over the flow's queue pairs), so a flow's share of a trial's losses is its ``lost_pkts`` over their sum.
- ``completion_ratio`` of a trial: ideal time from the trial's start to its last flow's end over the
  measured one (1 = ideal).
- uplink shares (uplinks.csv): the bytes each inter-switch port of a switch with flows to other
  switches sent during the trial (ports.csv, first sample at or before the first post to the last
  at or after the last ACK), over all its uplinks' bytes; ``balance_index``: Jain's fairness index
  of those bytes per switch, (sum x)^2 / (n sum x^2) (Jain, Chiu & Hawe, DEC-TR-301, 1984): 1 when
  even, 1/n when one uplink carries everything; the block gives the mean over switches and trials.
- parallel links (parallel_links.csv, only on a fabric with ``fabric.links_per_spine`` > 1): for every
  bundle of links between the same two switches, in each direction, the bytes each member sent during
  the trial (the window of uplinks.csv) and its share of the bundle; ``parallel_balance_index``: Jain's
  index of the members' bytes, mean over the bundles that sent anything (1: even; 1/L: one member of L
  carries it all, as hash polarization leaves it, docs/parallel_links.md); ``parallel_min_share``: the
  smallest member share of any such bundle and trial.
- ``idle_capacity_fraction``: over the ports.csv sample intervals in which a switch's demand for
  its uplinks reached their capacity (demand: the ideal max-min rates, testbed.workloads.pattern.ideal, of the
  flows in progress, summed over those leaving the switch, >= the uplinks' total rate), the share of
  that uplink capacity x time that sent nothing (1 - bits sent / (capacity x time), ACKs of reverse
  flows counted as sent); null when demand never reached capacity (an incast is limited at the
  receiver, not at the uplinks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from testbed.workloads.pattern.ideal import flow_rates, ideal_rates, qps_of, resources
from testbed.spec.hosts import short
from testbed.results.rundir import RunDir
from testbed.results.tables import percentile_us

FCT_COLUMNS = ["trial", "flow", "src", "dst", "size_bytes", "start_ns", "end_ns", "fct_us", "ideal_fct_us",
               "slowdown", "lost_pkts"]
RATE_COLUMNS = ["trial", "flow", "src", "dst", "bin_start_ns", "rx_bytes", "goodput_bps"]
QP_COLUMNS = ["trial", "flow", "channel", "src", "dst", "udp_sport", "size_bytes", "start_ns", "end_ns", "fct_us",
              "lost_pkts"]
UPLINK_COLUMNS = ["trial", "switch", "port", "peer", "tx_bytes", "share"]
PARALLEL_COLUMNS = ["trial", "switch", "peer", "port", "tx_bytes", "share"]


def jain_index(values) -> float:
    """(sum x)^2 / (n sum x^2); NaN for no values or all zero."""
    x = np.asarray(values, dtype=float)
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) and (x ** 2).sum() > 0 else math.nan


@dataclass(frozen=True)
class FlowSpan:
    """A sent flow over all its queue pairs: the first post and the last ACK (Unix ns), the bytes, the
    traffic.protocol.FlowMessage of each QP in QP order."""

    t_post_ns: int
    t_acked_ns: int
    size_bytes: int
    messages: tuple


def sent_flows(run, tr) -> list[tuple[int, FlowSpan]]:
    """(flow, its FlowSpan) of every flow of trial ``tr``, in flow order: the senders' FlowMessages grouped by
    their ``flow`` (one per queue pair of the flow)."""
    by_flow: dict[int, list] = {}
    for d in tr.done:
        for m in d.sent:
            by_flow.setdefault(m.flow, []).append(m)
    return [(fl, FlowSpan(min(m.t_post_ns for m in ms), max(m.t_acked_ns for m in ms),
                          sum(m.size_bytes for m in ms), tuple(sorted(ms, key=lambda m: m.channel))))
            for fl, ms in sorted(by_flow.items())]


def _pct(values, q: float, need: int = 1):
    v = percentile_us(values, q, need) if len(values) else math.nan
    return None if math.isnan(v) else float(v)


def lost_pkts(qps: pd.DataFrame | None, per_qp: bool = False) -> dict[tuple, int]:
    """(trial, sender rank, receiver rank) -> data packets sent and never received over all their queue
    pairs (module docstring); with ``per_qp``, (trial, sender rank, receiver rank, channel) -> those of one
    QP."""
    if qps is None or len(qps) == 0 or "trial" not in qps:
        return {}
    keys = ["trial", "rank", "peer"] + (["channel"] if per_qp else [])
    tx = qps[qps["role"] == "requester"].groupby(keys)["tx_pkts"].sum()
    rx = qps[qps["role"] == "responder"].groupby(keys)["rx_pkts"].sum()
    rx.index = rx.index.set_names(["trial", "peer", "rank"] + keys[3:]).reorder_levels(keys)
    return {k: int(v - rx.get(k, 0)) for k, v in tx.items()}


def qp_table(run, names: list[str], qps: pd.DataFrame | None) -> pd.DataFrame:
    """flow_qps.csv: one row per trial, flow and queue pair (module docstring); ``qps``: qps.csv (the UDP
    source port and the losses of each QP; their columns are empty without it)."""
    lost = lost_pkts(qps, per_qp=True)
    sport = {}
    if qps is not None and len(qps) and "trial" in qps:
        req = qps[qps["role"] == "requester"]
        sport = {(int(t), int(r), int(p), int(c)): int(s) for t, r, p, c, s in
                 req[["trial", "rank", "peer", "channel", "udp_sport"]].itertuples(index=False)}
    rows = []
    for tr in run.trials:
        for flow, span in sent_flows(run, tr):
            for m in span.messages:
                key = (tr.trial, m.rank, m.peer, m.channel)
                rows.append({"trial": tr.trial, "flow": flow, "channel": m.channel, "src": names[m.rank],
                             "dst": names[m.peer], "udp_sport": sport.get(key), "size_bytes": m.size_bytes,
                             "start_ns": m.t_post_ns, "end_ns": m.t_acked_ns,
                             "fct_us": (m.t_acked_ns - m.t_post_ns) / 1e3, "lost_pkts": lost.get(key)})
    return pd.DataFrame(rows, columns=QP_COLUMNS)


def fct_table(run, names: list[str], lost: dict | None = None) -> pd.DataFrame:
    """fct.csv: one row per trial and flow (module docstring); ``lost``: :func:`lost_pkts`."""
    flows = {f.flow: f for f in run.flows}
    rows = []
    for tr in run.trials:
        for flow, s in sent_flows(run, tr):
            f = flows[flow]
            fct = (s.t_acked_ns - s.t_post_ns) / 1e3
            ideal = run.ideal_fct_s[f.flow] * 1e6
            rows.append({"trial": tr.trial, "flow": f.flow, "src": names[f.src], "dst": names[f.dst],
                         "size_bytes": f.size_bytes, "start_ns": s.t_post_ns, "end_ns": s.t_acked_ns,
                         "fct_us": fct, "ideal_fct_us": ideal, "slowdown": fct / ideal,
                         "lost_pkts": (lost or {}).get((tr.trial, f.src, f.dst))})
    return pd.DataFrame(rows, columns=FCT_COLUMNS).sort_values(["trial", "flow"]).reset_index(drop=True)


def rate_table(run, names: list[str]) -> pd.DataFrame:
    """flow_rates.csv: each flow's received payload per bin of ``rate_bin_ms`` from the trial's start to
    its last byte (cumulative receiver samples interpolated at the bin edges)."""
    bin_ns = int(run.pattern.rate_bin_ms * 1e6)
    flows = {f.flow: f for f in run.flows}
    rows = []
    for tr in run.trials:
        for d in tr.done:
            for r in d.received:
                if not r.time_ns:
                    continue
                f = flows[r.flow]
                edges = np.arange(tr.start_at_ns, max(r.time_ns[-1], r.t_done_ns) + bin_ns, bin_ns)
                cum = np.interp(edges, r.time_ns, r.rx_bytes, left=0)
                for lo, b in zip(edges[:-1], np.diff(cum)):
                    rows.append({"trial": tr.trial, "flow": f.flow, "src": names[f.src], "dst": names[f.dst],
                                 "bin_start_ns": int(lo), "rx_bytes": float(b), "goodput_bps": b * 8 / (bin_ns / 1e9)})
    return pd.DataFrame(rows, columns=RATE_COLUMNS)


def _overlap(run, tr) -> tuple[list[float], float] | None:
    """(payload bytes each receiver got, seconds) in the window where every flow of trial ``tr`` sends
    (module docstring, ``throughput_ratio``), or None without a window of two bins."""
    sent = [s for d in tr.done for s in d.sent]
    recv = [r for d in tr.done for r in d.received]
    t_lo = max(s.t_post_ns for s in sent) + 0.1 * min(run.ideal_fct_s.values()) * 1e9
    t_hi = min(r.t_done_ns for r in recv)
    if t_hi - t_lo < 2 * run.pattern.rate_bin_ms * 1e6:
        return None
    got = [float(np.interp(t_hi, r.time_ns, r.rx_bytes) - np.interp(t_lo, r.time_ns, r.rx_bytes)) for r in recv]
    return got, (t_hi - t_lo) / 1e9


def throughput_ratio(run, tr, efficiency: float) -> float | None:
    """The trial's throughput ratio (module docstring), or None without a window of two bins."""
    o = _overlap(run, tr)
    if o is None:
        return None
    got, seconds = o
    return sum(got) * 8 / seconds / (sum(run.ideal_rates.values()) * efficiency)


def overlap_jain(run, tr) -> float | None:
    """Jain's index of the flows' goodput while every flow of trial ``tr`` sends (module docstring), or None."""
    o = _overlap(run, tr)
    return None if o is None or len(o[0]) < 2 else jain_index(o[0])


def _uplinks(layout) -> dict[str, list[tuple[str, str, float]]]:
    """switch -> [(its interface, the far switch, rate bit/s)] of its links to other switches."""
    hosts = {h.name for h in layout.hosts}
    out: dict[str, list] = {}
    for ln in layout.links:
        if ln.a.node in hosts or ln.b.node in hosts:
            continue
        out.setdefault(ln.a.node, []).append((ln.a.intf, ln.b.node, ln.rate_bps))
        out.setdefault(ln.b.node, []).append((ln.b.intf, ln.a.node, ln.rate_bps))
    return out


def _port_series(ports: pd.DataFrame, port: str, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, cumulative tx bytes) of ``port`` from the last sample at or before t0 to the first at or after t1."""
    p = ports[ports["port"] == port]
    t, b = p["time_ns"].to_numpy(dtype=np.int64), p["tx_bytes"].to_numpy(dtype=float)
    lo = max(int(np.searchsorted(t, t0, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(t, t1, side="left")) + 1, len(t))
    return t[lo:hi], b[lo:hi]


def uplink_figures(run, ports: pd.DataFrame) -> tuple[pd.DataFrame, list[float], float | None]:
    """(uplinks.csv, Jain's index per switch and trial, idle capacity fraction or None) from ports.csv."""
    layout = run.fab.layout
    up = _uplinks(layout)
    cap, uses = resources(run.flows, layout)
    qps = qps_of(run.flows)
    demand_cache: dict = {}
    flows = {f.flow: f for f in run.flows}
    sw = {h.rank: layout.attachment(h.name).node for h in layout.hosts}
    rows, jains, idle_bits, cap_bits = [], [], 0.0, 0.0
    if ports is None or ports.empty:
        return pd.DataFrame(columns=UPLINK_COLUMNS), jains, None
    ports = ports.sort_values("time_ns")
    for tr in run.trials:
        sent = sent_flows(run, tr)
        t0, t1 = min(s.t_post_ns for _, s in sent), max(s.t_acked_ns for _, s in sent)
        cross = [(fl, s) for fl, s in sent if sw[flows[fl].src] != sw[flows[fl].dst]]
        for switch in sorted({sw[flows[fl].src] for fl, _ in cross}):
            series = {intf: _port_series(ports, intf, t0, t1) for intf, _, _ in up[switch]}
            moved = {intf: (b[-1] - b[0]) if len(b) else 0.0 for intf, (t, b) in series.items()}
            total = sum(moved.values())
            for intf, peer, _ in up[switch]:
                rows.append({"trial": tr.trial, "switch": short(layout, switch), "port": intf,
                             "peer": short(layout, peer), "tx_bytes": moved[intf],
                             "share": moved[intf] / total if total else math.nan})
            jains.append(jain_index(list(moved.values())))
            cap_bps = sum(r for _, _, r in up[switch])
            mine = [fl for fl, _ in cross if sw[flows[fl].src] == switch]
            t, _ = series[up[switch][0][0]]
            for i in range(len(t) - 1):
                mid = (t[i] + t[i + 1]) / 2
                active = frozenset(fl for fl, s in sent if s.t_post_ns <= mid < s.t_acked_ns)
                if active not in demand_cache:
                    demand_cache[active] = flow_rates(list(active), qps, cap, uses) if active else {}
                demand = sum(demand_cache[active].get(fl, 0.0) for fl in mine)
                if demand < cap_bps * (1 - 1e-9):
                    continue
                dt = (t[i + 1] - t[i]) / 1e9
                bits = sum(8 * float(np.interp(t[i + 1], st, sb) - np.interp(t[i], st, sb))
                           for st, sb in series.values() if len(st))
                cap_bits += cap_bps * dt
                idle_bits += max(cap_bps * dt - bits, 0.0)
    idle = idle_bits / cap_bits if cap_bits else None
    return pd.DataFrame(rows, columns=UPLINK_COLUMNS), jains, idle


def bundles(layout) -> dict[tuple[str, str], list[str]]:
    """(switch, far switch) -> that switch's interfaces of the links joining the two, for every pair joined
    by more than one link (parallel links, ``fabric.links_per_spine``), in link order."""
    out: dict[tuple[str, str], list[str]] = {}
    for switch, ends in _uplinks(layout).items():
        for intf, peer, _ in ends:
            out.setdefault((switch, peer), []).append(intf)
    return {pair: intfs for pair, intfs in out.items() if len(intfs) > 1}


def parallel_link_table(run, ports: pd.DataFrame) -> pd.DataFrame:
    """parallel_links.csv (module docstring): every bundle member's bytes in each trial's window; empty
    without parallel links or port samples."""
    layout = run.fab.layout
    groups = bundles(layout)
    rows = []
    if groups and ports is not None and not ports.empty:
        ports = ports.sort_values("time_ns")
        for tr in run.trials:
            sent = sent_flows(run, tr)
            t0, t1 = min(s.t_post_ns for _, s in sent), max(s.t_acked_ns for _, s in sent)
            for (switch, peer), intfs in sorted(groups.items()):
                moved = {}
                for intf in intfs:
                    _, b = _port_series(ports, intf, t0, t1)
                    moved[intf] = (b[-1] - b[0]) if len(b) else 0.0
                total = sum(moved.values())
                rows += [{"trial": tr.trial, "switch": short(layout, switch), "peer": short(layout, peer),
                          "port": intf, "tx_bytes": moved[intf], "share": moved[intf] / total if total else math.nan}
                         for intf in intfs]
    return pd.DataFrame(rows, columns=PARALLEL_COLUMNS)


def parallel_figures(table: pd.DataFrame) -> dict:
    """``parallel_balance_index`` and ``parallel_min_share`` of parallel_links.csv (module docstring); {}
    when the table is empty."""
    if table.empty:
        return {}
    busy = table.groupby(["trial", "switch", "peer"]).filter(lambda g: g["tx_bytes"].sum() > 0)
    if busy.empty:
        return {"parallel_balance_index": None, "parallel_min_share": None}
    jains = busy.groupby(["trial", "switch", "peer"])["tx_bytes"].apply(jain_index)
    return {"parallel_balance_index": float(jains.mean()), "parallel_min_share": float(busy["share"].min())}


def write_pattern_results(ctx, run, qps: pd.DataFrame, ports: pd.DataFrame, faults: dict | None) -> dict:
    """Write fct.csv, flow_rates.csv, uplinks.csv (and flow_qps.csv, parallel_links.csv where they apply)
    into the run directory; return the ``load_balance``
    block of summary.json (module docstring for every definition)."""
    layout = run.fab.layout
    names = [short(layout, h.name) for h in layout.hosts]
    run.ideal_rates = ideal_rates(run.flows, layout)
    fct = fct_table(run, names, lost_pkts(qps))
    out = RunDir(ctx.run_dir)
    out.write_table("fct", fct)
    out.write_table("flow_rates", rate_table(run, names))
    if any(f.qps > 1 for f in run.flows):
        out.write_table("flow_qps", qp_table(run, names, qps))
    uplinks, jains, idle = uplink_figures(run, ports)
    out.write_table("uplinks", uplinks)
    parallel = parallel_link_table(run, ports)
    if bundles(layout):
        out.write_table("parallel_links", parallel)
    ratios = [r for r in (throughput_ratio(run, tr, ctx.efficiency) for tr in run.trials) if r is not None]
    fair = [j for j in (overlap_jain(run, tr) for tr in run.trials) if j is not None and not math.isnan(j)]
    completion = completion_ratios(run)
    resp = qps[qps["role"] == "responder"] if len(qps) else qps
    reroute = [r["reroute_ms"] for r in (faults or {}).get("list", []) if r.get("reroute_ms") is not None]
    block = {
        "pattern": run.pattern.kind, "policy": ctx.spec.load_balance.policy, "entropy": ctx.spec.transport.entropy,
        "hash_basis": ctx.spec.load_balance.hash_basis, "selection_method": ctx.spec.load_balance.selection_method,
        "trials": len(run.trials), "flows_per_trial": len(run.flows), "seeds": [tr.seed for tr in run.trials],
        "qps_per_trial": sum(f.qps for f in run.flows),
        "throughput_ratio_mean": float(np.mean(ratios)) if ratios else None,
        "throughput_ratio_p5": _pct(ratios, 5.0), "throughput_ratio_trials": len(ratios),
        "overlap_jain_mean": float(np.mean(fair)) if fair else None,
        "overlap_jain_min": float(np.min(fair)) if fair else None,
        "completion_ratio_mean": float(np.mean(completion)) if completion else None,
        "completion_ratio_p5": _pct(completion, 5.0),
        "idle_capacity_fraction": idle,
        "balance_index": float(np.nanmean(jains)) if jains and not all(map(math.isnan, jains)) else None,
        "reorder_pkts": int(resp["out_of_order_pkts"].sum()) if len(resp) else 0,
        "max_reorder_pkts": int(resp["max_reorder_pkts"].max()) if len(resp) else 0,
        "reroute_ms": max(reroute) if reroute else None,
        **parallel_figures(parallel),
        "ideal_span_s": run.ideal_span_s,
        **fct_figures(fct),
    }
    return block


def completion_ratios(run) -> list[float]:
    """Each trial's ``completion_ratio`` (module docstring): ideal span / its start to its last ACK."""
    return [run.ideal_span_s / ((trial_end_ns(tr) - tr.start_at_ns) / 1e9) for tr in run.trials]


def trial_end_ns(tr) -> int:
    """The last ACK of trial ``tr`` (Unix ns)."""
    return max(s.t_acked_ns for d in tr.done for s in d.sent)


def fct_figures(fct: pd.DataFrame) -> dict:
    """``fct_p50_us``, ``fct_p99_us`` (nearest rank; p99 from one sample on), ``fct_samples``,
    ``slowdown_p50``, ``slowdown_p99``, ``slowdown_mean`` of fct.csv rows ``fct`` (None without rows)."""
    fct_us = fct["fct_us"].to_numpy(dtype=float)
    slow = fct["slowdown"].to_numpy(dtype=float)
    return {"fct_p50_us": _pct(fct_us, 50.0), "fct_p99_us": _pct(fct_us, 99.0, 1), "fct_samples": len(fct_us),
            "slowdown_p50": _pct(slow, 50.0), "slowdown_p99": _pct(slow, 99.0, 1),
            "slowdown_mean": float(fct["slowdown"].mean()) if len(fct) else None}


def format_load_balance(b: dict) -> str:
    """The ``load_balance`` block as printed lines."""
    def f(v, fmt=".3f"):
        return "n/a" if v is None else format(v, fmt)
    return "\n".join([
        f"# pattern {b['pattern']}: {b['flows_per_trial']} flows"
        + (f" on {b['qps_per_trial']} QPs" if b.get("qps_per_trial", b["flows_per_trial"]) != b["flows_per_trial"]
           else "") + f" x {b['trials']} trials, policy {b['policy']}, "
        f"entropy {b['entropy']}",
        f"# throughput/ideal mean {f(b['throughput_ratio_mean'])} p5 {f(b['throughput_ratio_p5'])} "
        f"({b['throughput_ratio_trials']} trials with all flows overlapping); goodput Jain while all send mean "
        f"{f(b.get('overlap_jain_mean'))} min {f(b.get('overlap_jain_min'))}; completion ideal/measured mean "
        f"{f(b['completion_ratio_mean'])} p5 {f(b['completion_ratio_p5'])}",
        f"# FCT p50 {f(b['fct_p50_us'], '.0f')} us p99 {f(b['fct_p99_us'], '.0f')} us; slowdown p50 "
        f"{f(b['slowdown_p50'])} p99 {f(b['slowdown_p99'])}; idle uplink capacity under excess demand "
        f"{f(b['idle_capacity_fraction'])}; balance index {f(b['balance_index'])}; {b['reorder_pkts']} packets "
        f"placed out of order" + (f"; reroute {b['reroute_ms']:.1f} ms" if b["reroute_ms"] is not None else ""),
    ] + ([f"# parallel links: balance index {f(b['parallel_balance_index'])}, smallest member share "
          f"{f(b['parallel_min_share'])} (parallel_links.csv)"] if "parallel_balance_index" in b else []))
