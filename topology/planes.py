"""Routing views of a layout with several planes: one independent network per plane component.

A dual-plane fabric (topology.dual_plane) is two networks that share only the hosts; a
scale-up domain (topology.scale_up) is one small network per server. Each host has one
interface in each (eth0 in plane 0, topology.model.Nic for the others) with its own address.
:func:`views` cuts the layout into one :class:`~topology.model.Layout` per connected
component of each plane's links, whose hosts carry their address and MAC in that plane, so
the single-plane code (topology.routing, controllers.ofplan, load balancers) routes each
network on its own and no route ever leads from one plane into another.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List

import networkx as nx

from topology.model import Host, Layout


def planes(layout: Layout) -> List[int]:
    """Plane numbers of the layout's links, ascending (``[0]`` for a one-plane fabric)."""
    return sorted({ln.plane for ln in layout.links})


def views(layout: Layout) -> List[Layout]:
    """One layout per connected component of each plane (``[layout]`` itself when the layout has
    no NIC beyond eth0). In a view a host's ``ip`` and ``mac`` are those of its interface in that
    plane; switches keep their names, so each switch is in exactly one view."""
    if not layout.nics:
        return [layout]
    nic = {(n.host, n.port): n for n in layout.nics}
    out: List[Layout] = []
    for plane in planes(layout):
        links = [ln for ln in layout.links if ln.plane == plane]
        g = nx.Graph()
        g.add_edges_from((ln.a.node, ln.b.node) for ln in links)
        for comp in sorted(nx.connected_components(g), key=lambda c: sorted(c)):
            hosts = []
            for h in layout.hosts:
                if h.name not in comp:
                    continue
                port = next((ln.a if ln.a.node == h.name else ln.b).number for ln in links
                            if h.name in (ln.a.node, ln.b.node))
                n = nic.get((h.name, port))
                hosts.append(h if n is None else Host(h.name, h.rank, n.ip, n.mac))
            out.append(replace(layout, switches=tuple(s for s in layout.switches if s.name in comp),
                               hosts=tuple(hosts), links=tuple(ln for ln in links if ln.a.node in comp), nics=()))
    return out


def view_of(layout: Layout, switch: str) -> Layout:
    """The view (:func:`views`) holding ``switch``; KeyError if none does."""
    for v in views(layout):
        if any(s.name == switch for s in v.switches):
            return v
    raise KeyError(switch)
