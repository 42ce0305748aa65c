"""Telemetry of a run split over several servers: each server samples its own ports and CPU.

On one server the runner samples the switch queues (dataplane.qdisc_sampler.QdiscSampler), the
departures of backlogged ports (testbed.measure.departure_capture.DepartureCapture), the CPU
(testbed.measure.cpu.CpuIdleMonitor) and reads the drop counters (testbed.measure.drops.DropSnapshot)
in its own process. In a cluster run the same objects run on every server
(:class:`ServerTelemetry`, kept there by testbed.cluster.remote) and :class:`ClusterTelemetry`
gathers their tables into one run directory: ports.csv and departures.csv are the union of the
servers' rows (port names are unique in a run), cpu.csv has one row per server and sample with a
``server`` column, and the drop snapshots are merged by summing each counter over the servers
(a counter named after a port or host exists on one server only; the machine-wide ones, such as
``softnet_dropped_pkts``, add up). ovs-vswitchd's log is not read in a cluster run
(``ovs_log_bytes`` None: the logged send errors are not counted).

Timestamps are each server's Unix clock (traffic.clock): on real machines keep them in sync (NTP/PTP),
or the rows of two servers do not line up in time.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd

from testbed.cluster.remote import RemoteObject, ServerSession
from testbed.measure.drops import DropSnapshot

SERVER_TELEMETRY = "testbed.cluster.telemetry:ServerTelemetry"


class ServerTelemetry:
    """Runs ON a server: its switch ports' queue sampler and departure capture, its CPU monitor, its drop
    counters. ``switch_ports``: this server's switch-side ports (may be empty: a server of hosts only);
    ``period_s``: the sampler's period; ``parent``: the qdisc the sampler reads; ``host_pids``/``host_ifs``:
    this server's hosts (DropSnapshot.take)."""

    def __init__(self, switch_ports: List[str], period_s: float, parent: int, host_pids: Dict[str, int],
                 host_ifs: Dict[str, List[str]]) -> None:
        from dataplane.qdisc_sampler import QdiscSampler
        from testbed.measure.cpu import CpuIdleMonitor
        from testbed.measure.departure_capture import DepartureCapture

        self.switch_ports, self.host_pids, self.host_ifs = list(switch_ports), host_pids, host_ifs
        self.departures = DepartureCapture(self.switch_ports) if self.switch_ports else None
        self.sampler = (QdiscSampler(self.switch_ports, period_s, parent=parent, on_sample=self.departures.on_sample)
                        if self.switch_ports else None)
        self.cpu = CpuIdleMonitor()
        self._entered: list = []

    def drops(self) -> DropSnapshot:
        """The drop counters of this server's hosts and switch ports now."""
        return DropSnapshot.take(self.host_pids, self.switch_ports, self.host_ifs)

    def start(self) -> None:
        for obj in (self.sampler, self.cpu, self.departures):  # the order of the runner's with-statement
            if obj is not None:
                obj.__enter__()
                self._entered.append(obj)

    def stop(self) -> None:
        while self._entered:
            self._entered.pop().__exit__(None, None, None)

    def frames(self) -> dict:
        """{"ports": sampler table or None, "departures": capture table or None, "cpu": CPU table}."""
        return {"ports": self.sampler.to_frame() if self.sampler is not None else None,
                "departures": self.departures.to_frame() if self.departures is not None else None,
                "cpu": self.cpu.samples()}


def merge_snapshots(snaps: Dict[str, DropSnapshot]) -> DropSnapshot:
    """One DropSnapshot of every server's: counters summed per key, queue drops united, no OVS log offset."""
    counters: Dict[str, int] = {}
    queue_drops: Dict[str, int] = {}
    for snap in snaps.values():
        for k, v in snap.counters.items():
            counters[k] = counters.get(k, 0) + v
        queue_drops.update(snap.queue_drops)
    return DropSnapshot(time_s=min((s.time_s for s in snaps.values()), default=0.0), counters=counters,
                        queue_drops=queue_drops, ovs_log_bytes=None)


class _Table:
    """What the runner's results writer reads of a sampler (``to_frame``) or CPU monitor (``samples``)."""

    def __init__(self, frame: Optional[pd.DataFrame]) -> None:
        self.frame = frame

    def to_frame(self) -> Optional[pd.DataFrame]:
        return self.frame

    def samples(self) -> Optional[pd.DataFrame]:
        return self.frame


class ClusterTelemetry:
    """The driver's side: one :class:`ServerTelemetry` per server of ``sessions`` (server ->
    testbed.cluster.remote.ServerSession), started and stopped together (a context manager).

    After the exit: ``sampler`` (``to_frame``: every server's port samples), ``departures`` (``to_frame``),
    ``cpu`` (``samples``: every server's rows, a ``server`` column) and ``by_server`` (server -> its
    frames, for the per-server verdict: testbed.cluster.verdict); :meth:`drops` merges the servers'
    counters (:func:`merge_snapshots`) and keeps each server's in ``snapshots``.
    """

    def __init__(self, sessions: Dict[str, ServerSession], ports_on: Dict[str, List[str]], period_s: float,
                 parent: int, host_pids: Dict[str, Dict[str, int]], host_ifs: Dict[str, Dict[str, List[str]]]):
        self.remote: Dict[str, RemoteObject] = {
            srv: s.new(SERVER_TELEMETRY, ports_on.get(srv, []), period_s, parent, host_pids.get(srv, {}),
                       host_ifs.get(srv, {})) for srv, s in sessions.items()}
        self.by_server: Dict[str, dict] = {}
        self.snapshots: List[Dict[str, DropSnapshot]] = []
        self.sampler = self.departures = self.cpu = None

    def drops(self) -> DropSnapshot:
        """Every server's drop counters now, merged (:func:`merge_snapshots`); each kept in ``snapshots``."""
        snaps = {srv: obj.call("drops") for srv, obj in self.remote.items()}
        self.snapshots.append(snaps)
        return merge_snapshots(snaps)

    def __enter__(self) -> "ClusterTelemetry":
        started = []
        try:
            for obj in self.remote.values():
                obj.call("start")
                started.append(obj)
        except BaseException:
            for obj in started:
                obj.call("stop")
            raise
        return self

    def __exit__(self, *exc) -> None:
        for obj in self.remote.values():
            obj.call("stop")
        self.by_server = {srv: obj.call("frames") for srv, obj in self.remote.items()}
        ports = [f["ports"] for f in self.by_server.values() if f["ports"] is not None]
        deps = [f["departures"] for f in self.by_server.values() if f["departures"] is not None]
        cpus = [f["cpu"].assign(server=srv) for srv, f in self.by_server.items() if f["cpu"] is not None]
        self.sampler = _Table(pd.concat(ports, ignore_index=True).sort_values("time_ns", kind="stable")
                              .reset_index(drop=True) if ports else None)
        self.departures = _Table(pd.concat(deps, ignore_index=True) if deps else None)
        self.cpu = _Table(pd.concat(cpus, ignore_index=True).sort_values("time_ns", kind="stable")
                          .reset_index(drop=True) if cpus else None)
