"""Mininet graph of a topology.model.Layout (the layout itself: topology/)."""
from __future__ import annotations

import ipaddress

from mininet.topo import Topo

from topology.model import Layout

#: NIC queue of a host, like a NIC ring: agents block on their small socket buffers before it
#: fills; a sender that offers more than the link rate without blocking (iperf3 -u) loses here
HOST_NIC_QUEUE_BYTES = 64 * 1024


class FabricTopo(Topo):
    """Every switch (with its dpid), host (IP with the fabric prefix length, MAC) and link
    (with its port numbers; a host's further interfaces with their topology.model.Nic address
    and prefix length) of ``layout``. No link shaping here: see dataplane.queues."""

    def build(self, layout: Layout) -> None:  # noqa: D102 (Mininet hook)
        prefix_len = ipaddress.IPv4Network(layout.fabric_prefix).prefixlen
        for s in layout.switches:
            self.addSwitch(s.name, dpid=f"{s.dpid:016x}")
        for h in layout.hosts:
            self.addHost(h.name, ip=f"{h.ip}/{prefix_len}", mac=h.mac)
        nics = {(n.host, n.port): n for n in layout.nics}
        for ln in layout.links:
            params = {}
            for i, end in (("1", ln.a), ("2", ln.b)):
                nic = nics.get((end.node, end.number))
                if nic is not None:  # a host's interface beyond eth0: its own address and MAC
                    params["params" + i] = {"ip": f"{nic.ip}/{ipaddress.IPv4Network(nic.prefix).prefixlen}"}
                    params["addr" + i] = nic.mac
            self.addLink(ln.a.node, ln.b.node, port1=ln.a.number, port2=ln.b.number, **params)

