"""summary.json's ``congestion`` block, from the files the controller's congestion loop wrote (its
``traffic_classes`` block: testbed.measure.class_queues.traffic_classes_block).

The loop (controllers/congestion/loop.py) runs in the controller process and
writes, when the controller stops, ``congestion_loop.json`` (controllers.loop_result.LoopResult, read
typed) and ``pfc_events.csv`` into the run directory. This module reads them into the
block and writes ``pfc_ports.csv`` (one row per ingress port and class that
paused its upstream: ``port, class, upstream, upstream_port, pauses_sent,
paused_time_s``; the upstream port is where the pause was received).

``pause_frames`` counts pause events (one per Xoff crossing: a PFC frame or a
class gate; refreshes of a standing pause are not counted), ``paused_time_s``
sums, over ports and classes, the time from each pause to its resume (a pause
still standing at the end runs to the last event of the loop's stop).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from controllers.contract import encode
from controllers.loop_result import PfcResult
from testbed.results.rundir import RunDir


def pfc_result(run_dir: Path) -> PfcResult | None:
    """The PFC part of the loop's result in ``run_dir`` (controllers.loop_result.PfcResult); None when no loop
    ran or PFC was off. Raises controllers.contract.ContractError when the result file is not a LoopResult."""
    loop = RunDir(run_dir).congestion_loop
    return loop.pfc if loop is not None else None


def kick_frames(run_dir: Path) -> int:
    """Frames of the PFC machinery a switch drops on table miss (0 without PFC): the loop's kick frames
    and the PFC frames hosts sent to their switch ports (a storm's: controllers/congestion/rx_pauses.py)."""
    pfc = pfc_result(run_dir)
    return pfc.kick_frames + pfc.rx_pfc_frames if pfc is not None else 0


def watchdog_drops_pkts(run_dir: Path) -> int:
    """Lossless packets the PFC watchdog's drop action took (dataplane.pfc_watchdog_drop; 0 without)."""
    pfc = pfc_result(run_dir)
    return pfc.watchdog_drops_pkts if pfc is not None else 0


def pfc_ports(events: pd.DataFrame) -> pd.DataFrame:
    """Per (port, class): pauses sent and paused time from ``pfc_events.csv``'s rows."""
    rows = []
    events = events[events["event"].isin(["pause", "resume"])]
    for (port, cls), ev in events.sort_values("time_ns").groupby(["port", "class"], sort=True):
        paused_ns, since, pauses = 0, None, 0
        for t, kind in zip(ev["time_ns"], ev["event"]):
            if kind == "pause" and since is None:
                since, pauses = t, pauses + 1
            elif kind == "resume" and since is not None:
                paused_ns, since = paused_ns + (t - since), None
        if since is not None:
            paused_ns += int(events["time_ns"].max()) - since
        rows.append({"port": port, "class": cls, "upstream": ev["upstream"].iloc[0],
                     "upstream_port": ev["upstream_port"].iloc[0], "pauses_sent": pauses,
                     "paused_time_s": round(paused_ns / 1e9, 6)})
    return pd.DataFrame(rows, columns=["port", "class", "upstream", "upstream_port", "pauses_sent",
                                       "paused_time_s"])


#: every key of summary.json's ``congestion`` block, in every run and in this order (a script's
#: ``summary["congestion"]["ce_marked_pkts"]`` never fails): ``enabled`` (the controller's ECN/PFC loop ran),
#: then the figures, each None when not measured (the loop, ECN, PFC, a PFC storm or a pattern workload's
#: flows absent from the run); a PFC storm's ``rest_goodput_<window>_bps`` follow when there is one
CONGESTION_KEYS = (
    "enabled",
    # the loop (:func:`congestion_block`)
    "controller_loop_p50_ms", "controller_loop_p99_ms", "controller_loop_max_ms", "loop_ticks", "loop_missed_ticks",
    "lossless_drops_pkts", "lossless_queue_p99_bytes", "lossless_queue_max_bytes",
    # ECN
    "ecn_marker", "kmin_bytes", "kmax_bytes", "pmax", "ect_pkts", "ce_marked_pkts",
    "ecn_loop_p50_ms", "ecn_loop_p99_ms", "ecn_loop_ticks", "ecn_loop_missed_ticks",
    # PFC; the BDP the *_bdp thresholds used (testbed.spec.congestion.bdp_basis)
    "pause_frames", "paused_time_s", "storms", "pfc", "bdp",
    # a PFC storm fault (testbed.results.pfc_storm.storm_block)
    "restores", "watchdog_drops_pkts", "watchdog_drops_bytes", "rx_pfc_frames", "pfc_storms", "storm_detect_ms",
    "storm_restore_after_end_ms",
    # a pattern workload's flows (testbed.results.congestion_flows.flow_figures)
    "steady_start_ns", "steady_s", "jain_index", "steady_goodput_bps", "bottleneck_port", "queue_p99_bytes",
    "bottleneck_util", "cnp_sent", "cnp_received", "cnp_min_gap_ms", "cnp_per_interval_max", "victim",
)


def stable_congestion(block: dict | None) -> dict:
    """summary.json's ``congestion`` block in its stable shape: every key of :data:`CONGESTION_KEYS` (None
    where ``block`` lacks it; ``enabled`` False when ``block`` is None: no loop ran), then ``block``'s other
    keys."""
    block = block or {}
    return {"enabled": bool(block), **{k: block.get(k) for k in CONGESTION_KEYS[1:]},
            **{k: v for k, v in block.items() if k not in CONGESTION_KEYS}}


def congestion_block(run_dir: Path) -> dict | None:
    """The block (None when no loop ran): loop time, lossless drops and queue, ECN counts and PFC pauses.

    Keys: ``controller_loop_p50_ms``, ``controller_loop_p99_ms``, ``controller_loop_max_ms``, ``loop_ticks``, ``loop_missed_ticks``,
    ``lossless_drops_pkts``, ``lossless_queue_p99_bytes``, ``lossless_queue_max_bytes``; with ECN
    ``ecn_marker``, ``kmin_bytes``, ``kmax_bytes``, ``pmax``, ``ect_pkts``, ``ce_marked_pkts`` and the loop
    time again as ``ecn_loop_p50_ms`` / ``ecn_loop_p99_ms`` / ``ecn_loop_ticks`` / ``ecn_loop_missed_ticks``;
    with PFC ``pause_frames``, ``paused_time_s``, ``storms`` (the watchdog's), ``pfc`` (Xoff, Xon, kick frames, actuation times).
    """
    run_dir = Path(run_dir)
    loop = RunDir(run_dir).congestion_loop
    if loop is None:
        return None
    block = {"controller_loop_p50_ms": loop.loop_p50_ms, "controller_loop_p99_ms": loop.loop_p99_ms,
             "controller_loop_max_ms": loop.loop_max_ms,
             "loop_ticks": loop.ticks, "loop_missed_ticks": loop.missed_ticks,
             "lossless_drops_pkts": loop.lossless_drops_pkts,
             "lossless_queue_p99_bytes": loop.lossless_queue_p99_bytes,
             "lossless_queue_max_bytes": loop.lossless_queue_max_bytes}
    if loop.ecn is not None:
        e = loop.ecn
        block.update({"ecn_marker": e.marker, "kmin_bytes": e.kmin_bytes, "kmax_bytes": e.kmax_bytes,
                      "pmax": e.pmax, "ect_pkts": e.ect_pkts, "ce_marked_pkts": e.ce_marked_pkts,
                      "ecn_loop_p50_ms": loop.loop_p50_ms, "ecn_loop_p99_ms": loop.loop_p99_ms,
                      "ecn_loop_ticks": loop.ticks, "ecn_loop_missed_ticks": loop.missed_ticks})
    if loop.pfc is not None:
        run = RunDir(run_dir)
        ports = pfc_ports(run["pfc_events"])
        run.write_table("pfc_ports", ports)
        block.update({"pause_frames": int(ports["pauses_sent"].sum()),
                      "paused_time_s": round(float(ports["paused_time_s"].sum()), 6),
                      "storms": loop.pfc.storms, "pfc": encode(loop.pfc)})
    return block
