"""Which fabric path each UDP source port takes: the path pools of balanced packet spraying.

The switches' ECMP select groups hash the 5-tuple (controllers.lb.ecmp), so a RoCEv2 packet's path
is a deterministic function of its UDP source port for a given (source, destination) address pair.
A sprayer drawing its ports at random from a fixed set spreads a QP's packets over the paths only as
evenly as the set happens to fall: with p ports over k paths a path's share is Binomial(p, 1/k)/p
(p = 64, k = 4: 0.25 +- 0.054, so the busiest of 4 uplinks carries about 11% more than its share
when 4 QPs meet). This module asks Open vSwitch where each candidate port goes, so the sender can
take an equal number of ports on every path and cycle through them (traffic.transport.entropy.Spray).

How: ``ofproto/trace`` (the OpenFlow pipeline's own translation, select-group bucket choice
included; ovs-vswitchd(8)) of a UDP packet from the source host's switch port, hop by hop: the
output port it names leads, by the topology model's links, to the next bridge, traced in turn,
until a host port (a switch with one routed port toward the destination is passed untraced). The
path is the tuple of (switch, output port) hops, so any Clos the controller routes (spine-leaf,
fat-tree, k not a power of two) is covered. Traces go over one unixctl
connection to ovs-vswitchd (the ``ovs`` Python library, os-ken's dependency): about 1 ms each here,
against about 14 ms for an ``ovs-appctl`` process. The pools are computed once per run and pair and
hold for the groups at that time: after a failure the controller's new groups move the ports of a
dead bucket elsewhere (spraying then is only as even as the hash), see docs/how-a-run-works.md (packet spraying).
"""
from __future__ import annotations

import logging
import random
import re
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from topology.model import Host, Layout
from topology.routing import PortSet, next_hop_ports
from traffic.transport.entropy import EPHEMERAL_FIRST_PORT, EPHEMERAL_LAST_PORT
from traffic.wire import ROCEV2_UDP_PORT

log = logging.getLogger(__name__)

#: where ovs-vswitchd writes its pid file and control socket (scripts/start-ovs's default)
OVS_RUNDIR = Path("/var/run/openvswitch")
#: at most this many candidate ports are traced per pair, in multiples of the ports wanted
MAX_CANDIDATE_FACTOR = 4
_OUTPUT_RE = re.compile(r"^\s*output:(\d+)\s*$", re.M)

#: a path: the (switch name, OpenFlow output port) of every hop
HopPath = Tuple[Tuple[str, int], ...]
#: topology.routing.next_hop_ports: switch -> host -> equal-cost ports
NextHops = Dict[str, Dict[str, PortSet]]


class TraceError(RuntimeError):
    """ovs-vswitchd could not be reached, or a trace did not end in one output port on a known link."""


class VswitchdTracer:
    """One unixctl connection to ovs-vswitchd; :meth:`egress` traces one packet through one bridge.

    Raises TraceError when the daemon's control socket cannot be opened."""

    def __init__(self, rundir: Path = OVS_RUNDIR):
        import ovs.unixctl.client  # os-ken's dependency; imported here so unit tests need no OVS
        try:
            pid = int((rundir / "ovs-vswitchd.pid").read_text().strip())
        except (OSError, ValueError) as e:
            raise TraceError(f"ovs-vswitchd pid file in {rundir}: {e}") from None
        ctl = rundir / f"ovs-vswitchd.{pid}.ctl"
        err, self._client = ovs.unixctl.client.UnixctlClient.create(str(ctl))
        if err:
            raise TraceError(f"cannot connect to {ctl}: error {err}")
        #: traces done
        self.traces = 0

    def egress(self, bridge: str, in_port: int, src_ip: str, dst_ip: str, sport: int, src_mac: str) -> int:
        """The OpenFlow port a RoCEv2 packet (UDP ``sport`` -> 4791) from ``src_ip`` (its interface's MAC
        ``src_mac``: with tenant isolation a host port admits only its host's own MAC and address) to
        ``dst_ip`` that enters ``bridge`` on ``in_port`` leaves by. Raises TraceError unless exactly one port."""
        flow = (f"in_port={in_port},udp,dl_src={src_mac},nw_src={src_ip},nw_dst={dst_ip},udp_src={sport},"
                f"udp_dst={ROCEV2_UDP_PORT}")
        err, reply_err, out = self._client.transact("ofproto/trace", [bridge, flow])
        self.traces += 1
        if err or reply_err is not None:
            raise TraceError(f"ofproto/trace {bridge} {flow}: {reply_err or err}")
        ports = set(int(p) for p in _OUTPUT_RE.findall(out))
        if len(ports) != 1:
            raise TraceError(f"ofproto/trace {bridge} {flow}: {len(ports)} output ports, expected 1")
        return ports.pop()

    def close(self) -> None:
        self._client.close()


def host_port(layout: Layout, ip: str) -> Tuple[str, int, str]:
    """(switch, OpenFlow port, host name) where the host interface with address ``ip`` (eth0 or a plane
    NIC) attaches. Raises KeyError for an address no host interface has."""
    for h in layout.hosts:
        ports = [0] if h.ip == ip else [n.port for n in layout.nics_of(h.name) if n.ip == ip]
        for p in ports:
            for ln in layout.links_of(h.name):
                here = ln.a if ln.a.node == h.name else ln.b
                if here.number == p:
                    far = ln.peer(h.name)
                    return far.node, far.number, h.name
    raise KeyError(f"no host interface has address {ip}")


def trace_path(layout: Layout, tracer: VswitchdTracer, src_ip: str, dst_ip: str, sport: int,
               next_hops: Optional[NextHops] = None) -> HopPath:
    """The hops of a packet from ``src_ip`` to ``dst_ip`` with UDP source port ``sport``, switch by
    switch until the destination host. ``next_hops``: topology.routing.next_hop_ports of the layout;
    where it names one port toward the destination the hop takes it untraced (the controller routes
    by the same table; only select groups need a trace). Raises TraceError on a loop, an output port
    no link has, or another host reached."""
    switch, in_port, src_host = host_port(layout, src_ip)
    src_mac = next((n.mac for n in layout.nics_of(src_host) if n.ip == src_ip), layout.node(src_host).mac)
    dst_host = host_port(layout, dst_ip)[2]
    hops: List[Tuple[str, int]] = []
    for _ in range(len(layout.switches) + 1):
        only = next_hops[switch][dst_host] if next_hops is not None else ()
        out = only[0] if len(only) == 1 else tracer.egress(switch, in_port, src_ip, dst_ip, sport, src_mac)
        hops.append((switch, out))
        link = next((ln for ln in layout.links_of(switch)
                     if (ln.a.node, ln.a.number) == (switch, out) or (ln.b.node, ln.b.number) == (switch, out)), None)
        if link is None:
            raise TraceError(f"{switch} port {out}: no link in the topology")
        far = link.peer(switch)
        if isinstance(layout.node(far.node), Host):
            if far.node != dst_host:
                raise TraceError(f"{src_ip} -> {dst_ip} port {sport} reached {far.node}, not {dst_host}")
            return tuple(hops)
        switch, in_port = far.node, far.number
    raise TraceError(f"{src_ip} -> {dst_ip} port {sport}: no host reached after {len(hops)} hops (a loop)")


def path_pools(layout: Layout, tracer: VswitchdTracer, src_ip: str, dst_ip: str, ports_wanted: int,
               next_hops: Optional[NextHops] = None) -> List[List[int]]:
    """UDP source ports from ``src_ip`` to ``dst_ip`` grouped by the path they take, paths in a stable
    order (sorted hops), each with at least ``ports_wanted // paths`` ports when tracing up to
    :data:`MAX_CANDIDATE_FACTOR` x ``ports_wanted`` candidates finds them (fewer otherwise).

    Candidates are drawn from 49152-65535 by a generator seeded with the pair, so pools repeat from
    run to run. First ``ports_wanted`` are traced (this finds every path with near certainty when
    ports_wanted >= 8 x paths: a path is missed with probability k (1 - 1/k)^p), then more until
    every path has its share. ``next_hops``: see :func:`trace_path`. Raises TraceError."""
    rng = random.Random(f"paths-{src_ip}-{dst_ip}")
    candidates = iter(rng.sample(range(EPHEMERAL_FIRST_PORT, EPHEMERAL_LAST_PORT + 1),
                                 MAX_CANDIDATE_FACTOR * ports_wanted))
    pools: Dict[HopPath, List[int]] = {}
    for _ in range(ports_wanted):
        port = next(candidates)
        pools.setdefault(trace_path(layout, tracer, src_ip, dst_ip, port, next_hops), []).append(port)
    share = max(1, ports_wanted // len(pools))
    for port in candidates:
        short = [p for p, ports in pools.items() if len(ports) < share]
        if not short:
            break
        path = trace_path(layout, tracer, src_ip, dst_ip, port, next_hops)
        if path in short:
            pools[path].append(port)
    return [pools[p] for p in sorted(pools)]


#: (run id, source address, destination address, ports wanted) -> pools, for the run's later trials
_CACHE: Dict[Tuple[str, str, str, int], List[List[int]]] = {}


def pools_for_pairs(layout: Layout, pairs: Sequence[Tuple[str, str]], ports_wanted: int,
                    tracer: Optional[VswitchdTracer] = None) -> Dict[Tuple[str, str], List[List[int]]]:
    """:func:`path_pools` of every (source, destination) address pair, traced once per run (cached by
    ``layout.run_id``): later trials of a pattern reuse them. Raises TraceError."""
    todo = [pr for pr in dict.fromkeys(pairs) if (layout.run_id, *pr, ports_wanted) not in _CACHE]
    if todo:
        own = tracer is None
        tracer = tracer or VswitchdTracer()
        t0, traces = time.monotonic(), tracer.traces
        try:
            hops = next_hop_ports(layout)
            for src, dst in todo:
                _CACHE[(layout.run_id, src, dst, ports_wanted)] = path_pools(layout, tracer, src, dst, ports_wanted,
                                                                             hops)
        finally:
            if own:
                tracer.close()
        log.info("entropy paths: %d address pairs, %d traces in %.2f s; paths per pair %s", len(todo),
                 tracer.traces - traces, time.monotonic() - t0,
                 sorted({len(_CACHE[(layout.run_id, *pr, ports_wanted)]) for pr in todo}))
    return {pr: _CACHE[(layout.run_id, *pr, ports_wanted)] for pr in pairs}
