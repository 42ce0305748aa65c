"""summary.json's ``faults`` block: each injected fault, when the controller saw it and when it had rerouted.

Inputs: the fault scheduler (testbed.emulation.faults: applied times, gray
drops) and the controller's events file (controllers/failover_app.py, one
JSON object per line). Per fault:

- ``detect_ms``: from ``applied_ns`` (the first interface or rule changed) to
  the controller's first ``link_down`` (``down``, ``gray``) or ``link_up``
  (``up``) event for one of the fault's links; None when it never came
  (``heal`` is never detected: a condemned link stays out of the routes);
- ``reroute_ms``: from ``applied_ns`` to the first ``rerouted`` event after
  the detection whose dead links hold all the fault's links (``down``,
  ``gray``) or none of them (``up``): every switch answered the barrier after
  its new flows and groups;
- ``detected_by``: ``port_status`` or ``gray`` (the counters detector), with
  the detector's ``measured_loss`` for gray.

Loss attribution (``lost_to_faults_pkts``): frames the gray rules dropped
(counted by their nftables counters) plus, for links taken down or condemned
as gray, frames lost in the dead link's queues and frames sent towards it
before the new routes were in (a spine that lost its only route to a leaf
drops what was already on its way: Open vSwitch counts those as pipeline
drops). The kernel counts these nowhere per fault, so they are bounded, not
counted: per downed or gray link and direction, the egress buffer in full
frames plus the frames the link carries at its rate during ``reroute_ms`` +
50 ms. Transport loss up to that bound is charged to the fault
(:func:`fault_loss_bound_pkts`).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Optional

from controllers.contract import Event, LinkDown, LinkUp, Rerouted, read_events


def _key(names) -> frozenset:
    return frozenset(names)


def fault_timings(applied: list, events: list[Event], run_id: str) -> list[dict]:
    """One dict per fault (see the module docstring); ``applied``: testbed.emulation.faults.AppliedFault;
    ``events``: the controller's (controllers.contract.read_events)."""
    rows = []
    for f in applied:
        links = {_key(x) for x in f.link_names(run_id)}
        row = dict(f.row(), links=[sorted(k) for k in links], detect_ms=None, reroute_ms=None, detected_by=None,
                   measured_loss=None)
        rows.append(row)
        if f.applied_ns is None or f.spec.action in ("heal", "pfc_storm"):  # a storm: the PFC watchdog's
            continue
        want = LinkUp if f.spec.action == "up" else LinkDown
        t0 = f.applied_ns
        cause = "gray" if f.spec.action == "gray" else "port_status"
        det = next((e for e in events if type(e) is want and e.time_ns >= t0
                    and e.cause == cause and _key(e.link) in links), None)
        if det is None:
            continue
        row["detect_ms"] = round((det.time_ns - t0) / 1e6, 2)
        row["detected_by"] = det.cause
        row["measured_loss"] = det.loss
        for e in events:
            if not isinstance(e, Rerouted) or e.time_ns < det.time_ns:
                continue
            dead = {_key(x) for x in e.dead_links}
            if (want is LinkDown and links <= dead) or (want is LinkUp and not links & dead):
                row["reroute_ms"] = round((e.time_ns - t0) / 1e6, 2)
                break
    return rows


#: Fault actions that take a link out of the routes (the controller re-plans around it).
REROUTING_ACTIONS = ("down", "gray")


def fault_loss_bound_pkts(rows: list[dict], link_bps: float, buffer_bytes: int, frame_bytes: int) -> int:
    """Most frames the downed and gray links of ``rows`` can have lost (module docstring): per link and
    direction, ceil(buffer / frame) + ceil(link rate x (reroute_ms + 50 ms) / frame)."""
    total = 0
    for r in rows:
        if r["action"] not in REROUTING_ACTIONS or r["applied_ns"] is None:
            continue
        window_s = ((r["reroute_ms"] if r["reroute_ms"] is not None else 1000.0) + 50.0) / 1e3
        per_dir = math.ceil(buffer_bytes / frame_bytes) + math.ceil(link_bps / 8 * window_s / frame_bytes)
        total += 2 * len(r["links"]) * per_dir
    return total


def write_csv(run_dir: Path, rows: list[dict]) -> None:
    """faults.csv with the controller's timings (testbed.emulation.faults.CSV_COLUMNS + detect/reroute)."""
    if not rows:
        return
    cols = [c for c in rows[0] if c != "links"]
    with open(Path(run_dir) / "faults.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def faults_block(scheduler, run_dir: Path, run_id: str) -> Optional[dict]:
    """summary.json's ``faults`` (None for a run without faults); rewrites faults.csv with the timings."""
    if scheduler is None or not scheduler.faults:
        return None
    events = read_events(run_dir)
    rows = fault_timings(scheduler.faults, events, run_id)
    write_csv(run_dir, rows)
    return {"injected": sum(r["applied_ns"] is not None for r in rows), "planned": len(rows),
            "errors": list(scheduler.errors), "gray_drops_pkts": scheduler.gray_drops_pkts,
            "controller_events": len(events), "list": rows}
