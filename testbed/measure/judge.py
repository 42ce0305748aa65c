"""Judge one finished run: its tables and counters in, the fidelity verdict and transport totals out.

Gathers what :func:`testbed.measure.verdict.evaluate` needs from a run
(switch-queue drops from the counters read before and after the traffic, the
transport's totals, one row per host NIC), then adds the checks judged
outside it: Open vSwitch's send socket and the controller's health.
"""
from __future__ import annotations

import pandas as pd

from testbed.measure import drops, timing
from testbed.measure.thresholds import thresholds_for
from testbed.measure.send_buffer import judge_send_buffer
from testbed.measure.verdict import FAILED, PASSED, FidelityVerdict, evaluate, transport_totals
from testbed.run_context import Recording, RunContext


def host_tx_frame(qps: pd.DataFrame, host_names: list[str], link_bps: float) -> pd.DataFrame:
    """One row per host NIC: bytes of all its requester QPs over the longest time one of them had work.

    Columns host, tx_wire_bytes, tx_busy_s, link_bps (an approximation when
    several QPs of a host overlap only partly). ``host_names[rank]``: the
    host of each rank. A QP's work time leaves out the time its congestion control held
    ready packets back (``tx_paced_ns``, DCQCN pacing): then the QP, not the CPU, set the pace.
    """
    req = qps[qps["role"] == "requester"].copy()
    if "tx_paced_ns" in req:
        req["tx_work_ns"] = (req["tx_work_ns"] - req["tx_paced_ns"]).clip(lower=0)
    active = req[req["tx_pkts"] > 0]
    per_host = active.groupby("rank").agg(tx_wire_bytes=("tx_wire_bytes", "sum"), tx_work_ns=("tx_work_ns", "max"))
    return pd.DataFrame({"host": [host_names[int(r)] for r in per_host.index],
                         "tx_wire_bytes": per_host["tx_wire_bytes"].to_numpy(),
                         "tx_busy_s": per_host["tx_work_ns"].to_numpy() / 1e9,
                         "link_bps": link_bps})


def judge_run(ctx: RunContext, rec: Recording, qps: pd.DataFrame, ports: pd.DataFrame,
              cpu: pd.DataFrame) -> tuple[FidelityVerdict, dict]:
    """The verdict of a run with every measurement in, and summary.json's ``transport`` totals.

    ``qps``, ``ports``, ``cpu``: the tables written to the run directory
    (testbed.results.tables.write_tables); the departures the capture saw are
    written to ``departures.csv`` here (testbed.measure.timing.write_departures).
    """
    fab = rec.fab
    # switch queue drops from the queue counters read before and after the traffic, not from sampler rows
    switch_drops = drops.queue_drops_delta(rec.drops_before, rec.drops_after)
    t = transport_totals(qps, [st.rx_pkts for st in rec.stats], switch_drops, ctx.transport.window_pkts)
    host_tx = host_tx_frame(qps, [h.name for h in fab.layout.hosts], ctx.spec.fabric.host_link_bps)
    verdict = evaluate(cpu, drops.delta(rec.drops_before, rec.drops_after), ports, fab.port_rate_bps,
                       host_tx, thresholds_for(ctx.spec), transport=t,
                       departures=timing.write_departures(rec.departures, ctx.run_dir))
    judge_send_buffer(verdict, ctx.send_buffer)
    controller = fab.controller_report  # deaths, restarts, OpenFlow errors (testbed.emulation.controller_supervisor)
    verdict.add("controller", FAILED if controller["violations"] else PASSED, "\n".join(controller["violations"]))
    return verdict, t
