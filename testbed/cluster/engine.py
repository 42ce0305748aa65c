"""A layout (topology/) built over several servers by Mininet's own cluster engine.

Mininet's ``mininet.examples.cluster`` does the work: ``MininetCluster`` opens one ssh
session per node (``ssh -tt root@server sudo -E mnexec ...``), ``RemoteOVSSwitch`` runs
``ovs-vsctl`` on the switch's server, ``RemoteHost`` lives in a network namespace there and
``RemoteSSHLink`` joins two nodes on different servers with a tap pair carried by
``ssh -o Tunnel=Ethernet -w 9:9`` (same-server links stay veth pairs). This module only
places the nodes (:mod:`topology.placement`), picks the node classes (userspace
datapath, fail-mode standalone: the bridges learn MACs themselves, no controller yet) and
turns checksum offloads off, which the userspace datapath needs.

Every server must allow root ssh with a key from where this runs, have ``sudo``, ``mnexec``
and ``ovs-vswitchd`` running (docs/cluster.md; :class:`testbed.cluster.servers.LocalServers`
makes such servers on one machine).
"""
from __future__ import annotations

import os
import signal
import time
from functools import partial
from typing import Dict, List, Optional, Sequence, Tuple

from mininet.examples.cluster import MininetCluster, Placer, RemoteHost, RemoteOVSSwitch, RemoteSSHLink
from mininet.link import TCIntf
from mininet.log import setLogLevel
from mininet.node import OVSSwitch

from topology.placement import Placement
from testbed.emulation.fabric import OFFLOADS_OFF
from testbed.emulation.topo import FabricTopo
from topology.model import Layout

DATAPATHS = ("user", "kernel")


def placer_class(placement: Placement) -> type:
    """A Mininet ``Placer`` subclass that puts every node where ``placement`` says
    (MininetCluster takes a class and constructs it with the topology's node lists)."""

    class LayoutPlacer(Placer):
        def place(self, node: str) -> str:  # noqa: D102 (Mininet hook)
            return placement.server_of[node]

    return LayoutPlacer


def own_group_hangup_ends() -> None:
    """The ``preexec_fn`` of every ssh Mininet starts for a remote node (its shell, a tunnel end, a command): a
    process group of its own, as Mininet's ``RemoteMixin._ignoreSignal`` makes, and SIGHUP's default action.

    Mininet ends a node by a SIGHUP to that group, then waits for it (``Node.terminate``, ``Node.cleanup``). A
    driver started with SIGHUP ignored (``nohup``; a test runner that ignores SIGHUP, SIGINT and SIGQUIT) passes
    the ignore on through sudo to ssh, which keeps a SIGHUP ignored at its start: the node's ssh did not end and
    ``net.stop()`` waited on it forever (the controller and the servers' testbed processes still up)."""
    os.setpgrp()
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class ClusterHost(RemoteHost):
    """Mininet's RemoteHost whose ssh ends at Mininet's SIGHUP even in a driver that ignores SIGHUP
    (:func:`own_group_hangup_ends`)."""

    _ignoreSignal = staticmethod(own_group_hangup_ends)


class ClusterOVSSwitch(RemoteOVSSwitch):
    """Mininet's RemoteOVSSwitch without the check of a *local* Open vSwitch: ``OVSSwitch.setup``
    runs ``ovs-vsctl show`` where the driver runs, which need not have one (the lab's console
    has none); each server's OVS answers through ssh when its switches start.

    ``argmax``: the longest ``ovs-vsctl`` command line of a batched start-up. Mininet's 128000 is the kernel's
    ARG_MAX, but here the batch is typed into the switch's shell over an ssh pty, whose line discipline keeps
    at most 4095 bytes of a line: a longer batch (a fat-tree k=4's 10 switches on one server) is cut and
    no bridge is created, silently. Mininet's RemoteOVSSwitch.batchStartup calls OVSSwitch.batchStartup, which
    reads ``OVSSwitch.argmax``: :meth:`batchStartup` sets it for the call."""

    argmax = 3500
    #: its ssh ends at Mininet's SIGHUP even in a driver that ignores SIGHUP (:func:`own_group_hangup_ends`)
    _ignoreSignal = staticmethod(own_group_hangup_ends)

    @classmethod
    def batchStartup(cls, switches, **kwargs):  # noqa: N802 (Mininet hook)
        saved = OVSSwitch.argmax
        OVSSwitch.argmax = cls.argmax
        try:
            return super().batchStartup(switches, **kwargs)
        finally:
            OVSSwitch.argmax = saved

    @classmethod
    def setup(cls) -> None:  # noqa: D102 (Mininet hook)
        return None


class ClusterFabric:
    """Context manager: ``layout`` running on ``placement.servers`` (module docstring).

    ``link_bps``: shape every link (both ends, HTB via Mininet's TCIntf) to this rate in bit/s,
    or None to leave links unshaped. ``datapath``: ``"user"`` (netdev) or ``"kernel"``.
    Attributes once entered: ``net`` (the MininetCluster), ``build_s`` (seconds from the first
    ssh to every switch started), ``tunnels`` (switch, interface, server) of every link end that
    is a tunnel.

    Raises ValueError for a bad ``datapath`` or ``link_bps``, or when ``placement`` does not
    cover every node of ``layout``; whatever Mininet raises when a server is unreachable.
    """

    def __init__(self, layout: Layout, placement: Placement, link_bps: Optional[float] = None,
                 datapath: str = "user") -> None:
        if datapath not in DATAPATHS:
            raise ValueError(f"datapath = {datapath!r}: allowed {list(DATAPATHS)}")
        if link_bps is not None and not (isinstance(link_bps, (int, float)) and 1e5 <= link_bps <= 1e10):
            raise ValueError(f"link_bps = {link_bps!r}: allowed None or 1e5..1e10 bit/s")
        missing = [n for n in [s.name for s in layout.switches] + [h.name for h in layout.hosts]
                   if n not in placement.server_of]
        if missing:
            raise ValueError(f"placement has no server for {missing[:5]}")
        self.layout = layout
        self.placement = placement
        self.link_bps = link_bps
        self.datapath = datapath
        self.net: Optional[MininetCluster] = None
        self.build_s: Optional[float] = None
        self.tunnels: List[Tuple[str, str, str]] = []

    def __enter__(self) -> "ClusterFabric":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        setLogLevel("warning")
        t0 = time.monotonic()
        switch = partial(ClusterOVSSwitch, datapath=self.datapath, failMode="standalone", protocols="OpenFlow13")
        link = RemoteSSHLink
        if self.link_bps is not None:
            link = partial(RemoteSSHLink, intf=TCIntf, bw=self.link_bps / 1e6)
        self.net = MininetCluster(topo=FabricTopo(layout=self.layout), servers=list(self.placement.servers),
                                  placement=placer_class(self.placement), switch=switch, host=ClusterHost,
                                  link=link, controller=None, build=False, autoSetMacs=False,
                                  autoStaticArp=False, waitConnected=False)
        self.net.build()
        self._offloads_off()
        self.net.start()
        self.build_s = time.monotonic() - t0
        self.tunnels = [(end.node.name, end.name, end.node.server) for ln in self.net.links
                        if getattr(ln, "tunnel", None) for end in (ln.intf1, ln.intf2)
                        if end.node.name in {s.name for s in self.layout.switches}]

    def _offloads_off(self) -> None:
        """Checksum/segmentation offloads off on every host and switch interface (userspace
        datapath) and no IPv6 chatter (router solicitations, MLD) into the fabric."""
        for node in self.net.hosts + self.net.switches:
            names = [i.name for i in node.intfList() if i.name != "lo"]
            cmds = [f"sysctl -qw net.ipv6.conf.{n}.disable_ipv6=1" for n in names]
            if self.datapath == "user":
                cmds += [f"ethtool -K {n} {' '.join(OFFLOADS_OFF)} 2>/dev/null" for n in names]
            if cmds:
                node.cmd("; ".join(cmds))

    def stop(self) -> None:
        """Stop the network (bridges, tunnels, node shells on every server); safe to call twice."""
        if self.net is not None:
            net, self.net = self.net, None
            net.stop()

    # -- access -------------------------------------------------------------
    def host(self, rank: int):
        """The Mininet node of the host with job rank ``rank``."""
        return self.net.get(self.layout.hosts[rank].name)

    def tunnel_bytes(self) -> Dict[str, Dict[str, int]]:
        """``{"<switch>:<intf>": {"tx_bytes": n, "rx_bytes": n}}`` for every tunnel end on a switch,
        read from the kernel's interface counters on that switch's server."""
        out: Dict[str, Dict[str, int]] = {}
        for sw, intf, _server in self.tunnels:
            node = self.net.get(sw)
            raw = node.cmd(f"cat /sys/class/net/{intf}/statistics/tx_bytes /sys/class/net/{intf}/statistics/rx_bytes")
            tx, rx = (int(v) for v in raw.split()[:2])
            out[f"{sw}:{intf}"] = {"tx_bytes": tx, "rx_bytes": rx}
        return out


def servers_of(placement: Placement, names: Sequence[str]) -> Dict[str, str]:
    """Server of each node in ``names`` (for reports: which host ran where)."""
    return {n: placement.server_of[n] for n in names}
