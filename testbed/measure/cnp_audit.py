"""The ``cnp_interval`` check: did every DCQCN notification point keep its CNP interval N?

DCQCN's notification point (NP) sends at most one CNP per N per QP (Zhu et al., SIGCOMM 2015,
sec. 3.1; traffic.transport.np). Each NP records the send time of every CNP and each reaction
point (RP) the arrival of every CNP (``cnp_events.csv``: ``role`` np / rp, ``time_ns`` on the
run's clock). This module audits them:

* judged, per NP QP: every interval between two consecutive CNP sends must be >= N - tolerance,
  N being the run's stated interval (manifest.json ``congestion_control.parameters.cnp_interval_us``,
  dilated) and the tolerance :data:`CNP_INTERVAL_TOLERANCE_NS` (1 us: the NP paces in integer ns
  from the same reading it records, so a correct NP is never below N; the microsecond only absorbs
  the rounding of a fractional N in us to ns). It fails naming each QP, its shortest interval and
  how many intervals were below N; not judged when no NP QP sent two CNPs (nothing to measure).
* reported, not judged, per RP QP: gaps between consecutive CNP arrivals below N - tolerance. The
  NP's pacing does not bound them: CNPs wait behind other packets in the responder host's NIC queue
  and in switch queues, and the RP's receive thread may be late, so two CNPs sent N apart can arrive
  closer. Where the NP and RP ends of a QP pair recorded the same number of CNPs they are matched in
  order (one path, FIFO queues: no reordering) and each CNP's one-way delay (arrival - send) is
  reported, with how many short arrival gaps followed NP intervals >= N (compressed on the way) and
  how many did not (the NP itself was short). CNPs the NP sent but the RP never got are counted.
* the agents' own N (traffic.transport.cc.cnp_interval_ns of the run's transport parameters) must
  equal the stated one: a run that paced with another N than it states fails.

Both ends use Unix ns from the same machine's CLOCK_MONOTONIC (traffic.clock), so send and arrival
times compare directly.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed.measure.fidelity_checks import FAILED, NOT_JUDGED, PASSED
from testbed.measure.verdict import FidelityVerdict
from testbed.results.rundir import RunDir, TableError

CHECK = "cnp_interval"
#: an NP interval counts as below N when shorter than N - this (module docstring)
CNP_INTERVAL_TOLERANCE_NS = 1_000
#: failing QPs named one by one in the verdict (the rest counted)
MAX_NAMED_QPS = 10
_KEY = ["trial", "rank", "peer", "channel"]


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, 4)


def _qp_groups(events: pd.DataFrame, role: str):
    """(trial, rank, peer, channel, qpn), sorted send/arrival times (int64 ns) of each QP end of ``role``."""
    ev = events[events["role"] == role]
    if "trial" not in ev:
        ev = ev.assign(trial=0)
    for key, g in ev.groupby(_KEY + ["qpn"], sort=True):
        yield tuple(int(k) for k in key), np.sort(g["time_ns"].to_numpy(dtype=np.int64))


def _qp_name(role: str, trial: int, rank: int, peer: int, channel: int, qpn: int, trials: bool) -> str:
    what = (f"NP of responder QP {qpn:#x} at rank {rank} (CNPs to rank {peer}'s requester" if role == "np" else
            f"RP of requester QP {qpn:#x} at rank {rank} (CNPs from rank {peer}'s responder")
    extra = (f", channel {channel}" if channel else "") + (f", trial {trial}" if trials else "")
    return what + extra + ")"


def audit_cnps(events: pd.DataFrame | None, interval_ns: int, unrecorded: dict | None = None,
               tolerance_ns: int = CNP_INTERVAL_TOLERANCE_NS) -> tuple[str, str, dict]:
    """Judge the NP intervals of ``events`` against ``interval_ns`` and report the RP gaps (module docstring).

    ``events``: cnp_events.csv rows (rank, peer, qpn, channel, role np|rp, time_ns; ``trial`` in pattern
    runs), or None / empty when no CNP was recorded. ``interval_ns``: the NP's interval N, ns (> 0).
    ``unrecorded``: CNPs and rate changes past the agents' caps (traffic.protocol.Stats.unrecorded, summed),
    put in the figures. Returns (status passed|failed|not_judged, reason: one line per failing QP or why
    not judged, figures for summary.json: ``interval_us``, ``tolerance_us``, ``np`` and ``rp`` blocks with
    totals and ``per_qp`` rows, ``unrecorded``). Raises ValueError for ``interval_ns`` <= 0.
    """
    if interval_ns <= 0:
        raise ValueError(f"interval_ns={interval_ns}: the CNP interval N must be > 0")
    floor_ns = interval_ns - tolerance_ns
    fig = {"interval_us": interval_ns / 1e3, "tolerance_us": tolerance_ns / 1e3,
           "unrecorded": dict(unrecorded or {"np_cnps": 0, "rp_cnps": 0, "rate_changes": 0})}
    if events is None or events.empty:
        events = pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "peer", "qpn", "channel", "time_ns")}
                              | {"role": pd.Series(dtype="str")})
    trials = "trial" in events and events["trial"].nunique() > 1

    # -- notification points: judged ----------------------------------------------------------------------
    np_rows, sends, failing = [], {}, []
    for (trial, rank, peer, channel, qpn), t in _qp_groups(events, "np"):
        sends[(trial, rank, peer, channel)] = t
        d = np.diff(t)
        below = int((d < floor_ns).sum())
        row = {"trial": trial, "rank": rank, "peer": peer, "channel": channel, "qpn": qpn, "cnps": len(t),
               "min_interval_ms": _ms(d.min()) if len(d) else None, "below_n": below}
        np_rows.append(row)
        if below:
            failing.append((int(d.min()), row))
    intervals = [r for r in np_rows if r["min_interval_ms"] is not None]
    fig["np"] = {"qps": len(np_rows), "cnps": sum(r["cnps"] for r in np_rows),
                 "min_interval_ms": min((r["min_interval_ms"] for r in intervals), default=None),
                 "below_n": sum(r["below_n"] for r in np_rows), "per_qp": np_rows}

    # -- reaction points: reported ------------------------------------------------------------------------
    rp_rows, delays = [], []
    for (trial, rank, peer, channel, qpn), t in _qp_groups(events, "rp"):
        d = np.diff(t)
        short = d < floor_ns
        row = {"trial": trial, "rank": rank, "peer": peer, "channel": channel, "qpn": qpn, "cnps": len(t),
               "min_gap_ms": _ms(d.min()) if len(d) else None, "below_n": int(short.sum())}
        sent = sends.get((trial, peer, rank, channel))  # the responder at the peer for this rank's requester
        row["np_cnps"] = 0 if sent is None else len(sent)
        if sent is not None and len(sent) == len(t):
            delay = t - sent
            delays.append(delay)
            np_d = np.diff(sent)
            row.update(delay_min_ms=_ms(delay.min()), delay_p50_ms=_ms(np.median(delay)),
                       delay_max_ms=_ms(delay.max()),
                       below_n_after_paced_np=int((short & (np_d >= floor_ns)).sum()),
                       below_n_after_short_np=int((short & (np_d < floor_ns)).sum()))
        rp_rows.append(row)
    got = {(r["trial"], r["peer"], r["rank"], r["channel"]): r["cnps"] for r in rp_rows}
    lost = sum(max(0, len(t) - got.get(k, 0)) for k, t in sends.items())
    all_delay = np.concatenate(delays) if delays else np.array([], dtype=np.int64)
    fig["rp"] = {"qps": len(rp_rows), "cnps": sum(r["cnps"] for r in rp_rows),
                 "min_gap_ms": min((r["min_gap_ms"] for r in rp_rows if r["min_gap_ms"] is not None), default=None),
                 "below_n": sum(r["below_n"] for r in rp_rows),
                 "below_n_after_paced_np": sum(r.get("below_n_after_paced_np", 0) for r in rp_rows),
                 "cnps_not_received": lost, "matched_qps": len(delays),
                 "delay_min_ms": _ms(all_delay.min()) if len(all_delay) else None,
                 "delay_p50_ms": _ms(np.median(all_delay)) if len(all_delay) else None,
                 "delay_max_ms": _ms(all_delay.max()) if len(all_delay) else None,
                 "per_qp": rp_rows}

    if failing:
        failing.sort(key=lambda x: x[0])
        lines = [f"{_qp_name('np', r['trial'], r['rank'], r['peer'], r['channel'], r['qpn'], trials)}: "
                 f"{r['below_n']} of {r['cnps'] - 1} intervals between CNP sends below N = {interval_ns / 1e6:g} ms "
                 f"(shortest {r['min_interval_ms']:g} ms; tolerance {tolerance_ns / 1e3:g} us)"
                 for _, r in failing[:MAX_NAMED_QPS]]
        if len(failing) > MAX_NAMED_QPS:
            lines.append(f"and {len(failing) - MAX_NAMED_QPS} more notification points sent CNPs less than N apart")
        return FAILED, "\n".join(lines), fig
    if not np_rows:
        return NOT_JUDGED, ("no notification point sent a CNP (no data packet arrived CE-marked): no CNP "
                            "interval to audit"), fig
    if not intervals:
        return NOT_JUDGED, (f"no notification point sent two CNPs ({fig['np']['cnps']} single CNPs on "
                            f"{len(np_rows)} QPs): no CNP interval to audit"), fig
    return PASSED, "", fig


def stated_interval_ns(run_dir: Path) -> int | None:
    """N as the run states it: manifest.json ``congestion_control.parameters.cnp_interval_us.value`` x 1000,
    rounded to ns; None when the manifest has none."""
    try:
        m = RunDir(run_dir).manifest
        return int(round(float(m["congestion_control"]["parameters"]["cnp_interval_us"]["value"]) * 1000))
    except (TableError, ValueError, KeyError, TypeError):
        return None


def judge_cnp_interval(verdict: FidelityVerdict, run_dir: Path, stats: list, transport) -> None:
    """Add the ``cnp_interval`` check to ``verdict`` when the run's congestion control has notification
    points (DCQCN; ``transport``: traffic.transport.TransportParams); nothing otherwise.

    Reads ``run_dir/cnp_events.csv`` (absent: no CNP recorded) and N (:func:`stated_interval_ns`; the
    agents' own N when the manifest states none, said in the figures' ``interval_from``);
    ``stats``: the agents' traffic.protocol.Stats, for the events past the caps. Also fails when the
    agents' own N differs from the stated one (the run did not run what it says)."""
    from traffic.transport.cc import cnp_interval_ns

    agents_ns = cnp_interval_ns(transport)
    if agents_ns is None:
        return
    events = RunDir(run_dir).table("cnp_events")
    unrecorded = {"np_cnps": 0, "rp_cnps": 0, "rate_changes": 0}
    for st in stats or ():
        for k, v in st.unrecorded().items():
            unrecorded[k] += v
    stated_ns = stated_interval_ns(run_dir)
    status, reason, fig = audit_cnps(events, stated_ns or agents_ns, unrecorded)
    fig["agents_interval_us"] = agents_ns / 1e3
    fig["interval_from"] = "manifest.json" if stated_ns else "the agents (manifest.json states no cnp_interval_us)"
    stated_ns = stated_ns or agents_ns
    if agents_ns != stated_ns:  # the agents did not run the N the run states
        mismatch = (f"the notification points paced CNPs with N = {agents_ns / 1e3:g} us, but manifest.json states "
                    f"cnp_interval_us = {stated_ns / 1e3:g}")
        status, reason = FAILED, "\n".join(filter(None, [mismatch, reason if status == FAILED else ""]))
    verdict.add(CHECK, status, reason, fig)
