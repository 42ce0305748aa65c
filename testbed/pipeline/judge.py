"""Judge one finished run: its tables and counters in, the fidelity verdict and transport totals out.

Gathers what :func:`testbed.measure.verdict.evaluate` needs from a run
(switch-queue drops from the counters read before and after the traffic, the
transport's totals, one row per host NIC), then adds the checks judged
outside it: Open vSwitch's send socket, the controller's health and, with
DCQCN, the notification points' CNP intervals (testbed.measure.cnp_audit).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.measure import accounting, drops
from testbed.measure.departure_capture import write_departures
from testbed.measure.cnp_audit import judge_cnp_interval
from testbed.measure.pfc_paused import mark_paused
from testbed.measure.thresholds import thresholds_for
from testbed.measure.send_buffer import judge_send_buffer
from testbed.results.congestion import watchdog_drops_pkts
from testbed.measure.fidelity_checks import FAILED, PASSED
from testbed.measure.transport_totals import transport_totals
from testbed.measure.verdict import FidelityVerdict, evaluate
from testbed.pipeline.context import Recording, RunContext


def host_tx_frame(qps: pd.DataFrame, host_names: list[str], link_bps: float,
                  extra_tx_bytes: dict[str, int] | None = None,
                  nic_paused_ns: dict[int, int] | None = None) -> pd.DataFrame:
    """One row per host NIC: bytes of all its requester QPs over the longest time one of them had a
    packet ready to send with its window open (``tx_busy_ns``).

    Columns host, tx_wire_bytes, tx_busy_s, link_bps. ``host_names[rank]``: the host of each rank.
    Time a QP's congestion control held a ready packet back (``tx_paced_ns``, DCQCN pacing) or a PFC
    pause held it (``pfc_paused_ns``) is taken out: then the QP or the fabric, not the CPU, set the
    pace. The longest QP's time (not the union of the QPs') errs toward a higher rate when a host's QPs
    were busy at different times (testbed.measure.fidelity_checks.check_hosts). ``extra_tx_bytes``: host -> frame
    bytes of other traffic its NIC carried meanwhile (the scenario's background flows), added to its row.
    ``nic_paused_ns``: rank -> time its NIC's lossless class was paused by PFC frames (PfcRxStats.paused_ns).
    A QP's own ``pfc_paused_ns`` counts only the pauses it saw before a send; frames already handed to the
    paused NIC hold the agent inside its send, which the QP counts as busy (a 4:1 PFC incast's senders,
    paused 2.7 of 3.1 s, were judged CPU-starved at 28 %). So each QP's held time is at least its host's
    paused time; this errs toward a higher rate when the host was paused while the QP waited for ACKs.
    """
    req = qps[qps["role"] == "requester"].copy()
    req["ready_ns"] = req["tx_busy_ns"]
    if "pfc_paused_ns" in req or nic_paused_ns:
        qp_paused = req["pfc_paused_ns"].fillna(0) if "pfc_paused_ns" in req else 0
        nic = req["rank"].map(lambda r: (nic_paused_ns or {}).get(int(r), 0))
        req["pfc_held_ns"] = np.maximum(qp_paused, nic)
    for held in ("tx_paced_ns", "pfc_held_ns"):
        if held in req:
            req["ready_ns"] = (req["ready_ns"] - req[held].fillna(0)).clip(lower=0)
    # a NIC cannot send faster than its line: a QP was ready at least its wire time (held times that
    # overlapped its sending, like a PFC pause counted from frame to frame, are not taken out past that)
    wire_ns = req["tx_wire_bytes"].fillna(0) * 8e9 / link_bps
    req["ready_ns"] = np.maximum(req["ready_ns"], np.minimum(req["tx_busy_ns"], wire_ns))
    active = req[req["tx_pkts"] > 0]
    keys = ["rank", "trial"] if "trial" in active else ["rank"]  # pattern trials: fresh QPs each, times add up
    per_host = active.groupby(keys).agg(tx_wire_bytes=("tx_wire_bytes", "sum"), ready_ns=("ready_ns", "max"))
    per_host = per_host.groupby(level="rank").sum()
    extra = extra_tx_bytes or {}
    hosts = [host_names[int(r)] for r in per_host.index]
    return pd.DataFrame({"host": hosts,
                         "tx_wire_bytes": per_host["tx_wire_bytes"].to_numpy() + [extra.get(h, 0) for h in hosts],
                         "tx_busy_s": per_host["ready_ns"].to_numpy() / 1e9,
                         "link_bps": link_bps})


def judge_run(ctx: RunContext, rec: Recording, qps: pd.DataFrame, ports: pd.DataFrame,
              cpu: pd.DataFrame, faults: dict | None = None,
              sizes: pd.DataFrame | None = None, background_lost_pkts: int = 0,
              background_tx_bytes: dict[str, int] | None = None) -> tuple[FidelityVerdict, dict]:
    """The verdict of a run with every measurement in, and summary.json's ``transport`` totals.

    ``qps``, ``ports``, ``cpu``: the tables written to the run directory
    (testbed.results.tables.write_tables); the departures the capture saw are
    written to ``departures.csv`` here (testbed.measure.departure_capture.write_departures). ``faults``: summary.json's
    faults block (testbed.results.faults), whose losses are charged to the injected faults, not to the
    emulation (:func:`charge_faults`). ``background_lost_pkts``: packets of the scenario's background flows
    lost in the fabric (testbed.results.background.background_block): not RoCE, so they leave the switch
    queue drops before the identity counts the transport's packets (at most down to 0);
    ``background_tx_bytes``: host (full name) -> frame bytes its background flows sent, which its NIC carried
    beside its QPs' (:func:`host_tx_frame`).
    """
    fab = rec.fab
    # switch queue drops from the queue counters read before and after the traffic, not from sampler rows,
    # and the PFC watchdog's drops (a switch feature: dataplane.pfc_watchdog_drop)
    queue_drops = drops.queue_drops_delta(rec.drops_before, rec.drops_after)
    switch_drops = max(0, queue_drops - background_lost_pkts) + watchdog_drops_pkts(ctx.run_dir)
    t = transport_totals(qps, [st.rx_pkts for st in rec.stats], switch_drops, ctx.transport.window_pkts)
    t["loss_recovery"] = ctx.transport.loss_recovery
    host_tx = host_tx_frame(qps, [h.name for h in fab.layout.hosts], ctx.spec.fabric.host_link_bps,
                            background_tx_bytes, {st.rank: st.pfc.paused_ns for st in rec.stats})
    isolation_pkts = sum(r["packets"] for r in (getattr(rec.tenants, "drop_rows", None) or ()))
    counter_drops = discount_kick_frames(drops.delta(rec.drops_before, rec.drops_after), ctx.run_dir, isolation_pkts)
    retries = retries_by_host(qps, [h.name for h in fab.layout.hosts])
    if faults is not None:
        counter_drops = charge_faults(ctx, faults, t, counter_drops, retries)
    other = accounting.elsewhere(counter_drops, retries,
                                 frozenset(h for h, b in (background_tx_bytes or {}).items() if b))
    identity = accounting.loss_identity(t, other, watchdog_drops_pkts(ctx.run_dir),
                                        background_pkts=min(background_lost_pkts, queue_drops))
    t["unexplained_lost_pkts"] = identity.unexplained_pkts
    t["host_nic_retries"] = sum(other.host_nic_retries.values())
    if rec.workload is not None:  # e.g. pattern trials: the CPU while flows ran, not while agents restarted
        cpu = rec.workload.cpu_while_traffic(cpu)
    verdict = evaluate(cpu, other.losses, mark_paused(ports, ctx.run_dir), fab.port_rate_bps,
                       host_tx, thresholds_for(ctx.spec), transport=t,
                       departures=write_departures(rec.departures, ctx.run_dir), identity=identity,
                       sizes=sizes, frame_bytes=ctx.spec.transport.payload_bytes + 58,
                       window_pkts=ctx.transport.window_pkts, link_delay_us=max(ctx.spec.fabric.delays_us.values()))
    if rec.servers is not None:  # a run over several servers: each server judged on its own (testbed.cluster.verdict)
        from testbed.cluster.verdict import judge_servers
        judge_servers(verdict, rec.servers, thresholds_for(ctx.spec),
                      rec.workload.cpu_while_traffic if rec.workload is not None else None)
    verdict.figures["drops"]["host_nic_retries"] = other.host_nic_retries
    verdict.figures["drops"]["merged_counters"] = other.merged
    judge_send_buffer(verdict, ctx.send_buffer)
    judge_cnp_interval(verdict, ctx.run_dir, rec.stats, ctx.transport)  # DCQCN only: NP intervals >= N
    judge_controller(verdict, rec.controller, rec.t_measured_ns)
    return verdict, t


def retries_by_host(qps: pd.DataFrame, host_names: list[str]) -> dict[str, int]:
    """host -> sends its agents retried because the host NIC's queue was full (qps.csv ``nic_full_waits``
    of requesters and responders; ``host_names[rank]``)."""
    if qps is None or "nic_full_waits" not in qps:
        return {}
    per_rank = qps.groupby("rank")["nic_full_waits"].sum()
    return {host_names[int(r)]: int(n) for r, n in per_rank.items() if n > 0}


def judge_controller(verdict: FidelityVerdict, report: dict, measured_until_ns: int | None) -> None:
    """Set (or replace) the ``controller`` check from summary.json's ``controller`` block ``report``
    (testbed.emulation.controller_supervisor: deaths, restarts, OpenFlow errors).

    Failed: any OpenFlow error, or a failed or partial restart after a death while measuring (at or
    before ``measured_until_ns``, Unix ns). A death after every measurement was in (the teardown) is
    named in the check's reason but does not fail it (:func:`controller_supervisor.violations`).
    """
    from testbed.emulation.controller_supervisor import violations

    failed, later = violations(report, measured_until_ns)
    verdict.replace("controller", FAILED if failed else PASSED, "\n".join(failed or later))


def discount_kick_frames(counter_drops: dict[str, int], run_dir, by_design_pkts: int = 0) -> dict[str, int]:
    """Open vSwitch's pipeline drops less the PFC loop's kick frames (dataplane/pfc_gate.py: sent on
    resume, dropped by the next switch on table miss, by design) and less ``by_design_pkts`` other
    packets dropped by design (tenant isolation's counted drop flows, testbed.tenants), at most down to 0."""
    from testbed.results.congestion import kick_frames

    kicks = kick_frames(run_dir) + by_design_pkts
    out = dict(counter_drops)
    for k in sorted(k for k in out if k.startswith(drops.PIPELINE_DROP_COUNTER)):
        taken = min(kicks, max(0, out[k]))
        out[k] -= taken
        kicks -= taken
    return out


def charge_faults(ctx: RunContext, faults: dict, t: dict, counter_drops: dict[str, int],
                  retries: dict[str, int] | None = None) -> dict[str, int]:
    """Charge the injected faults with the losses they caused; return the drop counters left to judge.

    Interface drop counters of the faulted links' interfaces (a veth whose peer is down drops what it is
    handed) move to ``faults["interface_drops_pkts"]``; Open vSwitch's pipeline drops (frames already on
    their way to a switch whose route the re-plan removed) move to ``faults["pipeline_drops_pkts"]`` when a
    down or gray fault was rerouted and they stay within the bound. Then sets in ``t`` (transport totals)
    ``lost_to_faults_pkts`` = gray drops (nftables counters) + the transport's loss beyond them, beyond the
    switch queues' and beyond what the counters left to judge saw elsewhere (testbed.measure.accounting,
    ``retries``: host -> NIC retries), up to the downed links' bound
    (testbed.results.faults.fault_loss_bound_pkts), and lowers ``unexplained_lost_pkts`` by it: a loss
    is charged once, to the fault or to the counter that saw it.
    """
    from testbed.results.faults import REROUTING_ACTIONS, fault_loss_bound_pkts
    from traffic.transport import wire_bytes
    from traffic import wire

    spec = ctx.spec
    frame = wire_bytes(wire.BTH_BYTES + spec.transport.payload_bytes + wire.ICRC_BYTES)
    bound = fault_loss_bound_pkts(faults["list"], spec.fabric.fabric_link_bps, spec.fabric.buffer_bytes, frame)
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
    left = {k: v for k, v in counter_drops.items() if k not in hit}
    gray = int(faults["gray_drops_pkts"])
    lost = int(t["unexplained_lost_pkts"]) - accounting.elsewhere(left, retries or {}).total_pkts
    charged = gray + min(max(lost - gray, 0), bound)
    t["lost_to_faults_pkts"] = charged
    t["unexplained_lost_pkts"] = int(t["unexplained_lost_pkts"]) - charged
    faults["lost_to_faults_pkts"] = charged
    faults["down_loss_bound_pkts"] = bound
    return left
