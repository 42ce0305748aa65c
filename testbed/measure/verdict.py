"""The fidelity verdict: did the emulation stay honest, check by check?

Handigol et al., "Reproducible network experiments using container-based
emulation", CoNEXT 2012: an emulation is only trustworthy while the CPU is not
the bottleneck, links deliver their configured rate while busy and no packet
is lost outside the emulated queues. :func:`evaluate` judges one run with the
checks below; each gets a status:

* ``passed``: there was something to judge and it was within the limits;
* ``failed``: a limit was broken (one sentence per violation, with figures);
* ``not_judged``: nothing to judge (e.g. no switch port stayed backlogged),
  with the reason. A not-judged check does not make a run unfaithful, but it
  is printed and written to summary.json, never passed silently.

A run is faithful when no check failed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from testbed.measure.thresholds import FidelityThresholds

PASSED, FAILED, NOT_JUDGED = "passed", "failed", "not_judged"
#: The checks in the order they are printed.
CHECKS = ("cpu", "drops", "transport_loss", "spurious_retx", "bytes", "links", "hosts", "throughput",
          "packet_timing")
#: checks that measure whether the emulated links and NICs delivered their rate: a run is faithful only
#: when at least one of them was judged (and none failed); else its verdict is ``not_judged``
RATE_CHECKS = ("links", "hosts", "throughput")
#: busbw/link the largest collective of an uncontended run must reach (:func:`_check_throughput`)
MIN_UNCONTENDED_BUSBW_RATIO = 0.7
#: frames each rank must send in that collective for it to be judged (below, per-op latency dominates)
MIN_THROUGHPUT_FRAMES = 100
#: a fabric whose switch queues held >= 2 packets in at most this fraction of samples is uncontended
MAX_UNCONTENDED_FRACTION = 0.1
#: the run verdicts (summary.json ``verdict``)
FAITHFUL, NOT_FAITHFUL = "faithful", "not_faithful"


@dataclass
class FidelityVerdict:
    """faithful: no check failed and a rate check (:data:`RATE_CHECKS`) was judged (:attr:`status`).
    violations: one sentence per broken limit, with figures.
    not_judged: ``"check: reason"`` per check that had nothing to judge.
    checks: check name -> {"status": passed|failed|not_judged, "reason": str}.
    figures: JSON-ready numbers per check (cpu, drops, transport_loss, ...)."""

    faithful: bool
    violations: list[str]
    figures: dict
    checks: dict = field(default_factory=dict)
    not_judged: list[str] = field(default_factory=list)

    def add(self, name: str, status: str, reason: str = "", figures: Optional[dict] = None) -> None:
        """Add (or replace) one check's outcome; ``reason`` is the violation or why not judged."""
        if status not in (PASSED, FAILED, NOT_JUDGED):
            raise ValueError(f"status {status!r}: allowed {PASSED}, {FAILED}, {NOT_JUDGED}")
        self.checks[name] = {"status": status, "reason": reason}
        if figures is not None:
            self.figures[name] = figures
        if status == FAILED and reason:
            self.violations.extend(reason.split("\n"))
        if status == NOT_JUDGED:
            self.not_judged.append(f"{name}: {reason}")
        self.faithful = self.status == FAITHFUL

    @property
    def status(self) -> str:
        """``not_faithful`` when a check failed; ``not_judged`` when none failed but no rate check
        (:data:`RATE_CHECKS`) was judged among the checks made: nothing then measured whether the links
        and NICs kept their rate, and a run far below its link rate would pass unseen; else ``faithful``."""
        if any(c["status"] == FAILED for c in self.checks.values()):
            return NOT_FAITHFUL
        made = [n for n in RATE_CHECKS if n in self.checks]
        if made and not any(self.checks[n]["status"] == PASSED for n in made):
            return NOT_JUDGED
        return FAITHFUL

    def replace(self, name: str, status: str, reason: str = "", figures: Optional[dict] = None) -> None:
        """Like :meth:`add`, after taking back the check's earlier outcome (its violations and not-judged
        line): a check judged again with more information (the controller's final report)."""
        old = self.checks.pop(name, None)
        if old is not None and old["status"] == FAILED and old["reason"]:
            for line in old["reason"].split("\n"):
                if line in self.violations:
                    self.violations.remove(line)
        if old is not None and old["status"] == NOT_JUDGED:
            entry = f"{name}: {old['reason']}"
            if entry in self.not_judged:
                self.not_judged.remove(entry)
        self.add(name, status, reason, figures)

    def lines(self) -> list[str]:
        """The printed verdict: ``# fidelity: ...`` then one line per failed or not-judged check."""
        head = {FAITHFUL: "# fidelity: faithful", NOT_FAITHFUL: "# fidelity: NOT faithful:",
                NOT_JUDGED: "# fidelity: NOT JUDGED (no link or host rate could be judged: the run cannot be "
                            "called faithful):"}[self.status]
        judged = sum(c["status"] != NOT_JUDGED for c in self.checks.values())
        out = [f"{head} ({judged} of {len(self.checks)} checks judged)"]
        out += [f"#   - {v}" for v in self.violations]
        out += [f"#   not judged: {r}" for r in self.not_judged]
        return out


class _Check:
    """Collects one check's violations and its not-judged reason."""

    def __init__(self):
        self.violations: list[str] = []
        self.skip_reason = ""

    def outcome(self) -> tuple[str, str]:
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


def _check_cpu(cpu: Optional[pd.DataFrame], th: FidelityThresholds, chk: _Check) -> dict:
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


def _check_drops(drops: dict[str, int], th: FidelityThresholds, chk: _Check) -> dict:
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


def _check_transport_loss(t: Optional[dict], th: FidelityThresholds, chk: _Check, identity=None) -> dict:
    """With ``identity`` (testbed.measure.accounting.LossIdentity): its unexplained packets, beyond
    ``max_unexplained_drops`` either way, fail, the message stating every term. Without: the balance
    lost = sent - received - switch queue drops - losses charged to injected faults
    (``lost_to_faults_pkts``, testbed.measure.judge.charge_faults; all transport packets, both ways)."""
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


def spurious_retx_pkts(qps: pd.DataFrame, window_pkts: int) -> int:
    """Spurious retransmissions of a run: duplicates the loss of packets cannot explain.

    Definition: a data packet that reaches its responder with a PSN the
    responder had already accepted (``dup_pkts``) is a retransmission whose
    original had arrived. Go-back-N legitimately causes such duplicates after a
    loss on the same queue pair: a lost ACK, or a lost last packet recovered by
    timeout, makes the requester resend at most one window. So per queue pair
    (requester at rank r towards q, responder at rank q for r)::

        lost      = (requester tx_pkts - responder rx_pkts)          # data lost
                  + (responder acks_tx + naks_tx) - (requester acks_rx + naks_rx)  # ACKs/NAKs lost
        spurious  = max(0, responder dup_pkts - lost * window_pkts)

    With no loss anywhere every duplicate is spurious (a timer fired before an
    ACK that was on its way: e.g. a late ACK because the CPU was busy, or
    ``rto_us`` below the round trip). ``qps``: qps.csv rows (rank, peer, channel, role,
    tx_pkts, acks_rx, naks_rx, rx_pkts, dup_pkts, acks_tx, naks_tx).
    """
    if qps is None or len(qps) == 0:
        return 0
    q = qps.fillna(0)
    for key in ("trial", "channel"):  # pattern trials (testbed.patterns) have fresh QPs per trial; channels
        if key not in q:              # (traffic.collectives.channels) their own QPs per peer
            q = q.assign(**{key: 0})
    keys = ["rank", "peer", "trial", "channel"]
    req = q[q["role"] == "requester"].set_index(keys)[["tx_pkts", "acks_rx", "naks_rx"]]
    resp = q[q["role"] == "responder"]
    # the responder at rank q for peer r answers the requester at rank r towards peer q (same trial, channel)
    resp = resp.set_index(pd.MultiIndex.from_arrays([resp["peer"], resp["rank"], resp["trial"], resp["channel"]],
                                                    names=keys))
    j = req.join(resp[["rx_pkts", "dup_pkts", "acks_tx", "naks_tx"]], how="inner").astype("int64")
    lost = ((j["tx_pkts"] - j["rx_pkts"]).clip(lower=0)
            + (j["acks_tx"] + j["naks_tx"] - j["acks_rx"] - j["naks_rx"]).clip(lower=0))
    return int((j["dup_pkts"] - lost * window_pkts).clip(lower=0).sum())


def _check_spurious(t: Optional[dict], th: FidelityThresholds, chk: _Check) -> dict:
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


def _check_bytes(t: Optional[dict], chk: _Check) -> dict:
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


def _check_links(port_samples, port_rate_bps, th, chk: _Check) -> dict:
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


def _check_hosts(host_tx, port_rate_bps, th, chk: _Check, port_samples=None) -> dict:
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


def _check_throughput(sizes, port_samples, switch_drops_pkts: int, frame_bytes: int, chk: _Check,
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


def transport_totals(qps: pd.DataFrame, rx_pkts: list[int], switch_drops: int, window_pkts: int) -> dict:
    """Transport totals of a run for :func:`evaluate` and summary.json.

    ``qps``: qps.csv rows; ``rx_pkts``: packets each host's endpoint received;
    ``switch_drops``: emulated queue tail drops during the traffic. Sent packets
    are data (requester tx_pkts) plus ACKs, NAKs and CNPs (responder acks_tx, naks_tx, cnps_tx).
    ``retx_bytes``: payload bytes retransmitted; ``resent_share``: retx_bytes / posted_bytes.
    ``ce_marked_rx_pkts``: data packets that arrived CE-marked; ``cnps_tx``/``cnps_rx``: CNPs
    the notification points sent and the requesters received.
    """
    req, resp = qps[qps["role"] == "requester"], qps[qps["role"] == "responder"]
    cnps_tx = int(resp["cnps_tx"].sum()) if "cnps_tx" in resp else 0
    posted = int(req["posted_bytes"].sum())
    retx_bytes = int(req["retx_bytes"].sum()) if "retx_bytes" in req else 0
    sent_pkts = int(req["tx_pkts"].sum() + resp["acks_tx"].sum() + resp["naks_tx"].sum()) + cnps_tx
    recv_pkts = int(sum(rx_pkts))
    return {
        "posted_bytes": posted, "acked_bytes": int(req["acked_bytes"].sum()),
        "delivered_bytes": int(resp["delivered_bytes"].sum()), "order_errors": int(resp["order_errors"].sum()),
        "dup_pkts": int(resp["dup_pkts"].sum()), "retx_pkts": int(req["retx_pkts"].sum()),
        # payload bytes resent, and their share of the posted bytes (the data moved is 1 + share times the posted)
        "retx_bytes": retx_bytes, "resent_share": round(retx_bytes / posted, 4) if posted else 0.0,
        "spurious_retx_pkts": spurious_retx_pkts(qps, window_pkts),
        "timeouts": int(req["timeouts"].sum()), "naks": int(req["naks_rx"].sum()),
        "ce_marked_rx_pkts": int(resp["ce_pkts"].sum()) if "ce_pkts" in resp else 0, "cnps_tx": cnps_tx,
        "cnps_rx": int(req["cnps_rx"].sum()) if "cnps_rx" in req else 0,
        "sent_pkts": sent_pkts, "received_pkts": recv_pkts, "switch_drops_pkts": switch_drops,
        "unexplained_lost_pkts": sent_pkts - recv_pkts - switch_drops,
    }


def _check_timing(departures, port_samples, port_rate_bps, chk: _Check) -> dict:
    from testbed.measure.packet_timing import check_departures

    fig = check_departures(departures, port_samples, port_rate_bps, chk.violations)
    if fig["status"] == NOT_JUDGED:
        chk.skip_reason = ("no departures captured" if departures is None or len(departures) == 0 else
                           "no backlogged port had enough inter-departure gaps to judge")
    return fig


def evaluate(
    cpu: Optional[pd.DataFrame],
    drops: dict[str, int],
    port_samples: Optional[pd.DataFrame],
    port_rate_bps: dict[str, float],
    host_tx: Optional[pd.DataFrame],
    thresholds: FidelityThresholds,
    transport: Optional[dict] = None,
    departures: Optional[pd.DataFrame] = None,
    identity=None,
    sizes: Optional[pd.DataFrame] = None,
    frame_bytes: int = 1514,
    window_pkts: int = 16,
    link_delay_us: float = 0,
) -> FidelityVerdict:
    """Judge one run (Handigol et al., CoNEXT 2012, section 3: fidelity monitor).

    Args:
        cpu: :meth:`testbed.measure.cpu.CpuIdleMonitor.samples` (time_ns, idle_pct,
            min_cpu_idle_pct, cpu<N>_idle_pct...).
        drops: :func:`testbed.measure.drops.delta` of two snapshots (packets per key).
        port_samples: :meth:`dataplane.qdisc_sampler.QdiscSampler.to_frame` of the
            switch ports (time_ns, port, tx_bytes, backlog_bytes, backlog_pkts, ...).
        port_rate_bps: port -> configured rate in bit/s; may also hold host
            names -> host link rate (used when ``host_tx`` has no link_bps).
        host_tx: one row per host: ``host``, ``tx_wire_bytes`` (frame bytes the
            host NIC sent, without FCS), ``tx_busy_s`` (seconds it had data
            queued), optional ``link_bps``; or None.
        thresholds: :class:`FidelityThresholds`.
        transport: totals of the transport, or None: ``sent_pkts`` (data, ACK
            and NAK packets sent), ``received_pkts`` (packets the endpoints
            received), ``switch_drops_pkts`` (emulated queue tail drops, from
            counters read before and after the traffic), ``spurious_retx_pkts``
            (:func:`spurious_retx_pkts`), ``retx_pkts``, ``posted_bytes``,
            ``acked_bytes``, ``delivered_bytes``.
        departures: :meth:`testbed.measure.departure_capture.DepartureCapture.to_frame`, or None
            (packet_timing: :func:`testbed.measure.packet_timing.check_departures`).
        identity: the run's :class:`testbed.measure.accounting.LossIdentity`, or None (then
            transport_loss judges the older balance without the drops elsewhere).
        sizes: sizes.csv rows (size_bytes, busbw_ratio, busbw_factor), or None; ``frame_bytes``
            (a full data frame), ``window_pkts``, ``link_delay_us``: for :func:`_check_throughput`.

    Checks (statuses passed / failed / not_judged, see the module docstring):
        cpu: a second is saturated when the machine or ANY core was idle less
            than min_cpu_idle_pct; failed when more than ``max(1,
            max_saturated_fraction * seconds)`` seconds were (one saturated
            second, e.g. a process start, distorts at most that second),
            naming each core and its seconds (1-based seconds of the run).
        drops: sum of positive counter deltas (``ignored_drop_counters`` aside)
            > max_unexplained_drops, each counter named; any negative delta.
        transport_loss: the identity's unexplained packets beyond +-max_unexplained_drops
            (testbed.measure.accounting); without an identity ``sent - received - switch queue
            drops`` > max_unexplained_drops, or < 0 (a counter mismatch, never absorbed).
        spurious_retx: ``spurious_retx_pkts`` > max_spurious_retx_pkts.
        bytes: posted, acknowledged and delivered bytes differ.
        links: per switch port, over sampling intervals with backlog > 0 at
            both ends, ``8 * sum(delta tx_bytes) / (rate * sum(dt))`` <
            min_link_rate_ratio, for ports with >= min_backlogged_intervals such
            intervals; not judged when no port had that many.
        hosts: ``8 * tx_wire_bytes / tx_busy_s / rate`` < min_link_rate_ratio
            for hosts whose QPs had packets ready for >= min_host_busy_s (:func:`_check_hosts`).
        throughput: :func:`_check_throughput` (a slow collective on an uncontended fabric).
        packet_timing: :func:`testbed.measure.packet_timing.check_departures` (inter-departure
            gaps on backlogged links against the serialization time).

    Returns: :class:`FidelityVerdict`; ``figures`` has one entry per check plus "thresholds".
    Raises: ValueError when a sampled port or a host has no configured rate.
    """
    v = FidelityVerdict(faithful=True, violations=[], figures={})
    runs = {
        "cpu": lambda c: _check_cpu(cpu, thresholds, c),
        "drops": lambda c: _check_drops(drops, thresholds, c),
        "transport_loss": lambda c: _check_transport_loss(transport, thresholds, c, identity),
        "spurious_retx": lambda c: _check_spurious(transport, thresholds, c),
        "bytes": lambda c: _check_bytes(transport, c),
        "links": lambda c: _check_links(port_samples, port_rate_bps, thresholds, c),
        "hosts": lambda c: _check_hosts(host_tx, port_rate_bps, thresholds, c, port_samples),
        "throughput": lambda c: _check_throughput(
            sizes, port_samples, int((transport or {}).get("switch_drops_pkts", 0)), frame_bytes, c, window_pkts,
            link_delay_us),
        "packet_timing": lambda c: _check_timing(departures, port_samples, port_rate_bps, c),
    }
    for name in CHECKS:
        chk = _Check()
        fig = runs[name](chk)
        status, reason = chk.outcome()
        v.add(name, status, reason, fig)
    v.figures["thresholds"] = {k: (list(x) if isinstance(x, tuple) else x) for k, x in asdict(thresholds).items()}
    return v
