"""Judge one finished run: its tables and counters in, the fidelity verdict and transport totals out.

Gathers what :func:`testbed.measure.verdict.evaluate` needs from a run
(switch-queue drops from the counters read before and after the traffic, the
transport's totals, one row per host NIC), then adds the checks judged
outside it: Open vSwitch's send socket and the controller's health.
"""
from __future__ import annotations

import pandas as pd

from testbed.measure import drops, timing
from testbed.measure.pfc_paused import mark_paused
from testbed.measure.thresholds import thresholds_for
from testbed.measure.send_buffer import judge_send_buffer
from testbed.measure.verdict import FAILED, PASSED, FidelityVerdict, evaluate, transport_totals
from testbed.run_context import Recording, RunContext


def host_tx_frame(qps: pd.DataFrame, host_names: list[str], link_bps: float) -> pd.DataFrame:
    """One row per host NIC: bytes of all its requester QPs over the longest time one of them had work.

    Columns host, tx_wire_bytes, tx_busy_s, link_bps (an approximation when
    several QPs of a host overlap only partly). ``host_names[rank]``: the
    host of each rank. A QP's work time leaves out the time its congestion control held
    ready packets back (``tx_paced_ns``, DCQCN pacing) and the time a PFC pause held them
    (``pfc_paused_ns``): then the QP or the fabric, not the CPU, set the pace.
    """
    req = qps[qps["role"] == "requester"].copy()
    for held in ("tx_paced_ns", "pfc_paused_ns"):
        if held in req:
            req["tx_work_ns"] = (req["tx_work_ns"] - req[held]).clip(lower=0)
    active = req[req["tx_pkts"] > 0]
    keys = ["rank", "trial"] if "trial" in active else ["rank"]  # pattern trials: fresh QPs each, times add up
    per_host = active.groupby(keys).agg(tx_wire_bytes=("tx_wire_bytes", "sum"), tx_work_ns=("tx_work_ns", "max"))
    per_host = per_host.groupby(level="rank").sum()
    return pd.DataFrame({"host": [host_names[int(r)] for r in per_host.index],
                         "tx_wire_bytes": per_host["tx_wire_bytes"].to_numpy(),
                         "tx_busy_s": per_host["tx_work_ns"].to_numpy() / 1e9,
                         "link_bps": link_bps})


def judge_run(ctx: RunContext, rec: Recording, qps: pd.DataFrame, ports: pd.DataFrame,
              cpu: pd.DataFrame, faults: dict | None = None) -> tuple[FidelityVerdict, dict]:
    """The verdict of a run with every measurement in, and summary.json's ``transport`` totals.

    ``qps``, ``ports``, ``cpu``: the tables written to the run directory
    (testbed.results.tables.write_tables); the departures the capture saw are
    written to ``departures.csv`` here (testbed.measure.timing.write_departures). ``faults``: summary.json's
    faults block (testbed.results.faults), whose losses are charged to the injected faults, not to the
    emulation (:func:`charge_faults`).
    """
    fab = rec.fab
    # switch queue drops from the queue counters read before and after the traffic, not from sampler rows,
    # and the PFC watchdog's drops (a switch feature: testbed.emulation.watchdog_drop)
    from testbed.results.congestion import watchdog_drops_pkts
    switch_drops = drops.queue_drops_delta(rec.drops_before, rec.drops_after) + watchdog_drops_pkts(ctx.run_dir)
    t = transport_totals(qps, [st.rx_pkts for st in rec.stats], switch_drops, ctx.transport.window_pkts)
    t["loss_recovery"] = ctx.transport.loss_recovery
    host_tx = host_tx_frame(qps, [h.name for h in fab.layout.hosts], ctx.spec.fabric.host_link_bps)
    counter_drops = discount_kick_frames(drops.delta(rec.drops_before, rec.drops_after), ctx.run_dir)
    if faults is not None:
        counter_drops = charge_faults(ctx, faults, t, counter_drops)
    if rec.patterns is not None:  # judge the CPU while flows ran, not while agents restarted between trials
        cpu = rec.patterns.during_traffic(cpu)
    verdict = evaluate(cpu, counter_drops, mark_paused(ports, ctx.run_dir), fab.port_rate_bps,
                       host_tx, thresholds_for(ctx.spec), transport=t,
                       departures=timing.write_departures(rec.departures, ctx.run_dir))
    judge_send_buffer(verdict, ctx.send_buffer)
    controller = fab.controller_report  # deaths, restarts, OpenFlow errors (testbed.emulation.controller_supervisor)
    verdict.add("controller", FAILED if controller["violations"] else PASSED, "\n".join(controller["violations"]))
    return verdict, t


def discount_kick_frames(counter_drops: dict[str, int], run_dir) -> dict[str, int]:
    """Open vSwitch's pipeline drops less the PFC loop's kick frames (controllers/congestion/gate.py: sent on
    resume, dropped by the next switch on table miss, by design), at most down to 0."""
    from testbed.results.congestion import kick_frames

    kicks = kick_frames(run_dir)
    out = dict(counter_drops)
    for k in sorted(k for k in out if k.startswith(drops.PIPELINE_DROP_COUNTER)):
        taken = min(kicks, max(0, out[k]))
        out[k] -= taken
        kicks -= taken
    return out


def charge_faults(ctx: RunContext, faults: dict, t: dict, counter_drops: dict[str, int]) -> dict[str, int]:
    """Charge the injected faults with the losses they caused; return the drop counters left to judge.

    Sets in ``t`` (transport totals): ``lost_to_faults_pkts`` = gray drops (nftables counters) + transport
    loss beyond them up to the downed links' bound (testbed.results.faults.fault_loss_bound_pkts), and
    lowers ``unexplained_lost_pkts`` by it. Interface drop counters of the faulted links' interfaces
    (a veth whose peer is down drops what it is handed) move to ``faults["interface_drops_pkts"]``; Open
    vSwitch's pipeline drops (frames already on their way to a switch whose route the re-plan removed)
    move to ``faults["pipeline_drops_pkts"]`` when a down or gray fault was rerouted and they stay within
    the bound.
    """
    from testbed.results.faults import REROUTING_ACTIONS, fault_loss_bound_pkts
    from traffic.transport import wire_bytes
    from traffic import wire

    spec = ctx.spec
    frame = wire_bytes(wire.BTH_BYTES + spec.transport.payload_bytes + wire.ICRC_BYTES)
    bound = fault_loss_bound_pkts(faults["list"], spec.fabric.fabric_link_bps, spec.fabric.buffer_bytes, frame)
    gray = int(faults["gray_drops_pkts"])
    lost = int(t["unexplained_lost_pkts"])
    charged = gray + min(max(lost - gray, 0), bound)
    t["lost_to_faults_pkts"] = charged
    t["unexplained_lost_pkts"] = lost - charged
    faults["lost_to_faults_pkts"] = charged
    faults["down_loss_bound_pkts"] = bound
    rid = ctx.run_id
    ifnames = {f"{rid}{a}-" for r in faults["list"] for link in r["links"] for a in link}
    hit = {k: v for k, v in counter_drops.items() if "[" in k and any(k.split("[", 1)[1].startswith(n) and
                                                                       "-eth" in k for n in ifnames)}
    faults["interface_drops_pkts"] = {k: v for k, v in hit.items() if v}
    pipeline = {k: v for k, v in counter_drops.items() if k.startswith(drops.PIPELINE_DROP_COUNTER) and v > 0}
    rerouted = any(r["action"] in REROUTING_ACTIONS and r["reroute_ms"] is not None for r in faults["list"])
    if rerouted and sum(pipeline.values()) <= bound:
        faults["pipeline_drops_pkts"] = sum(pipeline.values())
        hit.update(pipeline)
    return {k: v for k, v in counter_drops.items() if k not in hit}
