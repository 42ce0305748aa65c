"""The fidelity checks, one function each: what a run is judged on, its figures and its violations.

Each ``check_*`` takes what it judges, the thresholds and a :class:`Check` that collects its violations
(one sentence each, with figures) or the reason it had nothing to judge, and returns its figures for
summary.json. :class:`Check.outcome` turns that into a status: ``passed``, ``failed`` or ``not_judged``.
The verdict (:func:`testbed.measure.verdict.evaluate`) runs them in order and assembles the run's
:class:`testbed.measure.verdict.FidelityVerdict`; other rooms add checks of their own with the same
statuses (e.g. testbed.measure.cnp_audit, testbed.cluster.verdict).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from testbed.measure.packet_timing import check_departures
from testbed.measure.thresholds import FidelityThresholds

PASSED, FAILED, NOT_JUDGED = "passed", "failed", "not_judged"
#: busbw/link the largest collective of an uncontended run must reach (:func:`check_throughput`)
MIN_UNCONTENDED_BUSBW_RATIO = 0.7
#: frames each rank must send in that collective for it to be judged (below, per-op latency dominates)
MIN_THROUGHPUT_FRAMES = 100
#: a fabric whose switch queues held >= 2 packets in at most this fraction of samples is uncontended
MAX_UNCONTENDED_FRACTION = 0.1


class Check:
    """Collects one check's violations (``violations``: one sentence each) and its not-judged reason
    (``skip_reason``); :meth:`outcome` gives the status."""

    def __init__(self):
        self.violations: list[str] = []
        self.skip_reason = ""

    def outcome(self) -> tuple[str, str]:
        """(status, reason): failed with the violations one per line, else not_judged with its reason, else
        passed with ''."""
        if self.violations:
            return FAILED, "\n".join(self.violations)
        if self.skip_reason:
            return NOT_JUDGED, self.skip_reason
        return PASSED, ""


def _mbps(bps: float) -> str:
    return f"{bps / 1e6:.1f} Mbit/s"


def _spans(seconds: list[int]) -> str:
    """[3, 4, 5, 9] -> 's 3-5, 9'."""
    out, start = [], None
    for i, s in enumerate(seconds):
        if start is None:
            start = s
        if i + 1 == len(seconds) or seconds[i + 1] != s + 1:
            out.append(f"{start}" if start == s else f"{start}-{s}")
            start = None
    return "s " + ", ".join(out)


def check_cpu(cpu: Optional[pd.DataFrame], th: FidelityThresholds, chk: Check) -> dict:
    """CPU saturation: seconds in which the machine or any core (``cpu``: time_ns or time_s, idle_pct,
    cpu<N>_idle_pct, min_cpu_idle_pct) was idle less than ``min_cpu_idle_pct``, against
    ``max(1, max_saturated_fraction x seconds)`` (testbed.measure.verdict.evaluate). Returns its figures."""
    if cpu is None or len(cpu) == 0:
        chk.skip_reason = "CPU idle was not sampled (run shorter than one sample)"
        return {"seconds": 0}
    idle = cpu["idle_pct"].to_numpy(dtype=float)
    n = len(idle)
    cores = sorted((c for c in cpu.columns if c.startswith("cpu") and c.endswith("_idle_pct")),
                   key=lambda c: int(c[3:-len("_idle_pct")]))
    low = pd.DataFrame({"machine": idle < th.min_cpu_idle_pct})
    for c in cores:
        low[c[: -len("_idle_pct")]] = cpu[c].to_numpy(dtype=float) < th.min_cpu_idle_pct
    if not cores and "min_cpu_idle_pct" in cpu:
        low["a core"] = cpu["min_cpu_idle_pct"].to_numpy(dtype=float) < th.min_cpu_idle_pct
    sat = low.any(axis=1).to_numpy()
    saturated = int(sat.sum())
    allowed = max(1, int(th.max_saturated_fraction * n))
    fig = {"seconds": n, "saturated_s": saturated, "allowed_saturated_s": allowed,
           "min_idle_pct": float(idle.min()), "mean_idle_pct": float(idle.mean()),
           "saturated_by_core_s": {k: int(v.sum()) for k, v in low.items() if k != "machine" and v.any()}}
    if "min_cpu_idle_pct" in cpu:
        fig["min_single_cpu_idle_pct"] = float(cpu["min_cpu_idle_pct"].min())
    if saturated > allowed:
        t = cpu["time_ns"].to_numpy(dtype=float) / 1e9 if "time_ns" in cpu else cpu["time_s"].to_numpy(dtype=float)
        rel = np.floor(t - t[0] + 1e-6).astype(int) + 1  # second k of the run (1-based)
        parts = [f"{k} {_spans(sorted(set(rel[v.to_numpy()].tolist())))}"
                 for k, v in low.items() if k != "machine" and v.any()]
        if low["machine"].any():
            parts.append(f"machine average {_spans(sorted(set(rel[low['machine'].to_numpy()].tolist())))}")
        chk.violations.append(
            f"CPU saturated: idle < {th.min_cpu_idle_pct:g}% in {saturated} of {n} s "
            f"(allowed {allowed} s; machine min {fig['min_idle_pct']:.1f}%): " + "; ".join(parts))
    return fig


def check_drops(drops: dict[str, int], th: FidelityThresholds, chk: Check) -> dict:
    """Drops outside the emulated switch queues: ``drops`` (counter -> packets, testbed.measure.drops.delta)
    summed beside ``ignored_drop_counters`` against ``max_unexplained_drops``; a negative delta fails too."""
    judged = {k: v for k, v in drops.items() if v and not k.startswith(th.ignored_drop_counters)}
    ignored = {k: v for k, v in drops.items() if v and k.startswith(th.ignored_drop_counters)}
    negative = {k: v for k, v in judged.items() if v < 0}
    positive = {k: v for k, v in judged.items() if v > 0}
    total = sum(positive.values())
    if negative:
        chk.violations.append("drop counters went backwards (reset during the run, drops unknown): "
                              + ", ".join(f"{k}={v}" for k, v in sorted(negative.items())))
    if total > th.max_unexplained_drops:
        chk.violations.append(
            f"{total} packets dropped outside the emulated switch queues (allowed {th.max_unexplained_drops}): "
            + ", ".join(f"{k}={v}" for k, v in sorted(positive.items(), key=lambda kv: -kv[1])))
    return {"unexplained_drops_pkts": total, "nonzero": dict(sorted(positive.items())),
            "reset_counters": dict(sorted(negative.items())), "ignored_nonzero": dict(sorted(ignored.items()))}


def check_transport_loss(t: Optional[dict], th: FidelityThresholds, chk: Check, identity=None) -> dict:
    """With ``identity`` (testbed.measure.accounting.LossIdentity): its unexplained packets, beyond
    ``max_unexplained_drops`` either way, fail, the message stating every term. Without: the balance
    lost = sent - received - switch queue drops - losses charged to injected faults
    (``lost_to_faults_pkts``, testbed.pipeline.judge.charge_faults; all transport packets, both ways)."""
    if t is None:
        chk.skip_reason = "no transport counters"
        return {}
    if identity is not None:
        u = identity.unexplained_pkts
        if u > th.max_unexplained_drops:
            chk.violations.append(f"transport lost {u} packets that no counter saw ({identity.sentence()}; "
                                  f"allowed {th.max_unexplained_drops})")
        elif u < -th.max_unexplained_drops:
            chk.violations.append(f"counter mismatch: the counters saw {-u} packets more lost than the transport "
                                  f"lost ({identity.sentence()}): a counter counted something twice, or packets "
                                  "other than the transport's were dropped")
        return identity.as_json()
    faults = int(t.get("lost_to_faults_pkts", 0))
    lost = int(t["sent_pkts"]) - int(t["received_pkts"]) - int(t["switch_drops_pkts"]) - faults
    fig = {"sent_pkts": int(t["sent_pkts"]), "received_pkts": int(t["received_pkts"]),
           "switch_drops_pkts": int(t["switch_drops_pkts"]), "unexplained_lost_pkts": lost}
    if "lost_to_faults_pkts" in t:
        fig["lost_to_faults_pkts"] = faults
    if lost > th.max_unexplained_drops:
        by_faults = (" and no injected fault explains", f", charged to faults {faults}") if "lost_to_faults_pkts" in t \
            else ("", "")
        chk.violations.append(
            f"transport lost {lost} packets that no emulated switch queue dropped{by_faults[0]} (sent "
            f"{fig['sent_pkts']}, received {fig['received_pkts']}, switch queue drops "
            f"{fig['switch_drops_pkts']}{by_faults[1]}; allowed "
            f"{th.max_unexplained_drops})")
    elif lost < 0:
        chk.violations.append(
            f"counter mismatch: the switch queues dropped {-lost} packets more than the transport lost (sent "
            f"{fig['sent_pkts']}, received {fig['received_pkts']}, switch queue drops {fig['switch_drops_pkts']}): "
            "packets other than the transport's were dropped, or a counter is wrong")
    return fig


def check_spurious(t: Optional[dict], th: FidelityThresholds, chk: Check) -> dict:
    """``t["spurious_retx_pkts"]`` (testbed.measure.transport_totals) against ``max_spurious_retx_pkts``."""
    if t is None or t.get("spurious_retx_pkts") is None:
        chk.skip_reason = "no transport counters"
        return {}
    n = int(t["spurious_retx_pkts"])
    if n > th.max_spurious_retx_pkts:
        chk.violations.append(
            f"{n} spurious retransmissions (duplicates at the responders that no lost packet explains; "
            f"{t.get('retx_pkts', '?')} retransmissions in all; allowed {th.max_spurious_retx_pkts}: "
            "fidelity.max_spurious_retx_pkts): a retransmission timer fired before an ACK that was on its way")
    return {"spurious_retx_pkts": n, "allowed": th.max_spurious_retx_pkts}


def check_bytes(t: Optional[dict], chk: Check) -> dict:
    """Posted, acknowledged and delivered bytes of the transport totals ``t`` must be equal."""
    if t is None:
        chk.skip_reason = "no transport counters"
        return {}
    fig = {k: int(t[k]) for k in ("posted_bytes", "acked_bytes", "delivered_bytes")}
    if not fig["posted_bytes"] == fig["acked_bytes"] == fig["delivered_bytes"]:
        chk.violations.append(
            f"byte mismatch: posted {fig['posted_bytes']}, acknowledged {fig['acked_bytes']}, "
            f"delivered {fig['delivered_bytes']} bytes")
    return fig


def link_ratio(g: pd.DataFrame) -> tuple[int, float, float, int]:
    """(backlogged intervals, their seconds, delivered bits in them, runs of consecutive ones) for one port."""
    g = g.sort_values("time_ns")
    t = g["time_ns"].to_numpy(dtype=np.int64)
    tx = g["tx_bytes"].to_numpy(dtype=np.int64)
    bl = g["backlog_bytes"].to_numpy(dtype=np.int64)
    dt_ns, dtx = np.diff(t), np.diff(tx)
    busy = (bl[:-1] > 0) & (bl[1:] > 0) & (dt_ns > 0) & (dtx >= 0)
    if "paused" in g:  # PFC held the port: backlogged and silent by design (testbed.measure.pfc_paused)
        paused = g["paused"].to_numpy(dtype=bool)
        busy &= ~paused[:-1] & ~paused[1:]
    runs = int(np.count_nonzero(busy[1:] & ~busy[:-1]) + (1 if len(busy) and busy[0] else 0))
    return int(busy.sum()), float(dt_ns[busy].sum()) / 1e9, float(dtx[busy].sum()) * 8.0, runs


def check_links(port_samples, port_rate_bps, th, chk: Check) -> dict:
    """Each switch port's delivered rate while backlogged (:func:`link_ratio`) against ``min_link_rate_ratio`` of
    its configured rate (``port_rate_bps``: port -> bit/s). Returns port -> figures.
    Raises ValueError when a sampled port has no configured rate."""
    figs: dict[str, dict] = {}
    if port_samples is None or len(port_samples) == 0:
        chk.skip_reason = "no switch queue samples"
        return figs
    for port, g in port_samples.groupby("port", observed=True, sort=True):
        port = str(port)
        rate = port_rate_bps.get(port)
        if rate is None:
            raise ValueError(f"port {port!r} has samples but no configured rate in port_rate_bps")
        n, busy_s, bits, runs = link_ratio(g)
        fig = {"configured_bps": float(rate), "backlogged_intervals": n, "backlogged_s": busy_s,
               "backlogged_runs": runs}
        if n >= th.min_backlogged_intervals and busy_s > 0:
            delivered = bits / busy_s
            ratio = delivered / rate
            # one frame in flight at each run's edges is not seen by the counter: the ratio's error bound
            slack = runs * th.max_frame_bytes * 8 / busy_s / rate
            fig.update(delivered_bps=delivered, ratio=ratio, ratio_error_bound=slack)
            if ratio + slack < th.min_link_rate_ratio:
                chk.violations.append(
                    f"link {port} delivered {_mbps(delivered)} = {ratio:.0%} of {_mbps(rate)} while backlogged "
                    f"({n} intervals in {runs} runs, {busy_s:.2f} s; measurement error up to {slack:.0%}; "
                    f"minimum {th.min_link_rate_ratio:.0%})")
        figs[port] = fig
    if not any("ratio" in f for f in figs.values()):
        chk.skip_reason = (f"no switch port was backlogged for {th.min_backlogged_intervals} sampling intervals "
                           "(no queue built up: nothing to measure the link rate on)")
    return figs


def fabric_congested_fraction(port_samples: pd.DataFrame, min_backlog_pkts: int = 2) -> float:
    """Fraction of sample times at which some switch port held >= ``min_backlog_pkts`` packets."""
    if port_samples is None or len(port_samples) == 0:
        return 0.0
    busy = port_samples["backlog_pkts"] >= min_backlog_pkts
    return float(busy.groupby(port_samples["time_ns"]).any().mean())


def check_hosts(host_tx, port_rate_bps, th, chk: Check, port_samples=None) -> dict:
    """Host NICs must be fed at line rate while their QPs have packets ready to send.

    ``tx_busy_s`` is the time a host's QPs had a packet ready and their window open
    (traffic.transport.qp: pacing and PFC pauses taken out): an agent that keeps its NIC
    queue full spends that time blocked on the NIC, so its bytes / busy time is at least the
    line rate; a CPU-starved agent feeds it slower. Waits for ACKs, loss recovery and
    timeouts are not busy time, so congestion and loss in the fabric never fail a host:
    the check is judged in every regime. ``fabric_congested_fraction`` is reported."""
    figs: dict[str, dict] = {}
    if host_tx is None or len(host_tx) == 0:
        chk.skip_reason = "no host sent data"
        return figs
    figs["fabric_congested_fraction"] = fabric_congested_fraction(port_samples)
    judged = 0
    for row in host_tx.itertuples(index=False):
        host = str(row.host)
        rate = getattr(row, "link_bps", None)
        if rate is None or pd.isna(rate):
            rate = port_rate_bps.get(host)
        if rate is None:
            raise ValueError(f"host {host!r}: no link_bps column and no port_rate_bps[{host!r}]")
        busy_s, wire = float(row.tx_busy_s), float(row.tx_wire_bytes)
        fig = {"configured_bps": float(rate), "tx_busy_s": busy_s, "tx_wire_bytes": wire}
        if busy_s >= th.min_host_busy_s:
            delivered = wire * 8.0 / busy_s
            ratio = delivered / rate
            fig.update(delivered_bps=delivered, ratio=ratio)
            judged += 1
            if ratio < th.min_link_rate_ratio:
                chk.violations.append(
                    f"host {host} NIC was fed {_mbps(delivered)} = {ratio:.0%} of {_mbps(rate)} while its QPs had "
                    f"packets ready to send ({busy_s:.2f} s; minimum {th.min_link_rate_ratio:.0%}): the CPU, not "
                    "the network, limited it")
        figs[host] = fig
    if not judged:
        chk.skip_reason = f"no host had packets ready to send for {th.min_host_busy_s:g} s"
    return figs


def check_throughput(sizes, port_samples, switch_drops_pkts: int, frame_bytes: int, chk: Check,
                      window_pkts: int = 16, link_delay_us: float = 0) -> dict:
    """The network cannot explain a slow collective when nothing in it was congested.

    Judged on the largest size of the run's collectives (``sizes``: sizes.csv rows with size_bytes,
    group_size, busbw_ratio, busbw_factor) when no switch queue held 2 packets in more than
    :data:`MAX_UNCONTENDED_FRACTION` of the samples (HTB bursts and late timers make brief ones) and no
    switch queue dropped: then every bandwidth-optimal algorithm runs at the link rate
    (busbw/link near 1; nccl-tests' busbw is defined so, doc/PERFORMANCE.md), and a busbw/link below
    :data:`MIN_UNCONTENDED_BUSBW_RATIO` means the emulation (the CPU: agents, Open vSwitch, softirqs)
    did not keep up, whatever the other checks saw (a 500 Mbit/s ring at 0.12-0.17 was
    called faithful). Not judged: no collectives, a largest size under :data:`MIN_THROUGHPUT_FRAMES`
    frames per rank, a contended fabric, a window under 4 packets or a link delay (then the window,
    not the link, may bound the rate)."""
    if sizes is None or len(sizes) == 0 or "busbw_ratio" not in sizes:
        chk.skip_reason = "no collective sizes (patterns and replays are judged by the other checks)"
        return {}
    top = sizes.sort_values("size_bytes").iloc[-1]
    factor = float(top.get("busbw_factor", 1.0) or 1.0)
    frames = factor * float(top["size_bytes"]) / frame_bytes
    congested = fabric_congested_fraction(port_samples)
    fig = {"size_bytes": int(top["size_bytes"]), "busbw_ratio": float(top["busbw_ratio"]),
           "frames_per_rank": frames, "fabric_congested_fraction": congested,
           "switch_drops_pkts": int(switch_drops_pkts), "minimum": MIN_UNCONTENDED_BUSBW_RATIO}
    if frames < MIN_THROUGHPUT_FRAMES:
        chk.skip_reason = (f"the largest collective moves {frames:.0f} frames per rank (judged from "
                           f"{MIN_THROUGHPUT_FRAMES}): per-operation latency, not the links, sets its busbw")
    elif congested > MAX_UNCONTENDED_FRACTION or switch_drops_pkts:
        chk.skip_reason = (f"the fabric was contended (queues backlogged in {congested:.0%} of samples, "
                           f"{switch_drops_pkts} switch-queue drops): the network may explain a lower busbw")
    elif window_pkts < 4 or link_delay_us:
        chk.skip_reason = "a window under 4 packets or a link delay may bound the rate below the link's"
    elif fig["busbw_ratio"] < MIN_UNCONTENDED_BUSBW_RATIO:
        chk.violations.append(
            f"the largest collective ({fig['size_bytes']} B) ran at busbw/link {fig['busbw_ratio']:.3f} while no "
            f"switch queue was backlogged and none dropped (minimum {MIN_UNCONTENDED_BUSBW_RATIO}): nothing in the "
            "network explains it; the emulation (CPU) did not keep up with the link rate")
    return fig


def check_timing(departures, port_samples, port_rate_bps, chk: Check) -> dict:
    """Packet timing (:func:`testbed.measure.packet_timing.check_departures`) of the captured departures."""
    fig = check_departures(departures, port_samples, port_rate_bps, chk.violations)
    if fig["status"] == NOT_JUDGED:
        chk.skip_reason = ("no departures captured" if departures is None or len(departures) == 0 else
                           "no backlogged port had enough inter-departure gaps to judge")
    return fig
