"""Equal-cost next hops on any layout, and the per-switch routes they make.

Shortest paths count hops (every link costs 1, as in OSPF with equal link
costs), computed with networkx on the switch graph. For a switch ``s`` and a
destination host ``d``, the equal-cost next hops are the ports of ``s`` whose
far end is one hop closer to ``d``; they are exactly the first hops of
``networkx.all_shortest_paths(s, d)`` (checked in tests/test_topology.py).
Hosts never forward: a path only enters a host that is its destination.

:func:`plan_routes` turns next hops into routes a controller installs: a /32
per host, or one route per switch subnet (see :class:`topology.model.Switch`)
when every host of that subnet has the same next hops at that switch; each
route's ports are either one output port or an ECMP set, and the distinct
ECMP sets of a switch are listed once so each becomes one select group.
Every route follows a strictly shorter path, so routes never loop; there is
no default route (an address outside every route is dropped on table miss).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Tuple

import networkx as nx

from topology.model import Host, Layout

#: Ports of one switch toward one destination, ascending; never empty.
PortSet = Tuple[int, ...]


class RoutingError(ValueError):
    """A host cannot be reached from some switch (the layout is not connected)."""


@dataclass(frozen=True)
class Route:
    """Send packets to ``prefix`` (IPv4 CIDR) out of one of ``ports``.

    ``via`` says what the prefix is: "host" (a /32) or "subnet" (a switch's subnet).
    """

    prefix: str
    ports: PortSet
    via: str


@dataclass(frozen=True)
class SwitchRoutes:
    """Routes of one switch. ``ecmp_sets`` lists each distinct multi-port set once,
    ascending: the controller makes select group i+1 of ``ecmp_sets[i]``."""

    switch: str
    routes: Tuple[Route, ...]
    ecmp_sets: Tuple[PortSet, ...]

    def group_id(self, ports: PortSet) -> int:
        """Select group id (1-based) of a multi-port set; ValueError if it is not one."""
        return self.ecmp_sets.index(ports) + 1


def switch_graph(layout: Layout) -> nx.MultiGraph:
    """Undirected multigraph of the switches; edge data ``ports`` = {switch name: port number}."""
    g = nx.MultiGraph()
    g.add_nodes_from(s.name for s in layout.switches)
    for ln in layout.links:
        if ln.a.node in g and ln.b.node in g:
            g.add_edge(ln.a.node, ln.b.node, ports={ln.a.node: ln.a.number, ln.b.node: ln.b.number})
    return g


def next_hop_ports(layout: Layout) -> Dict[str, Dict[str, PortSet]]:
    """{switch name: {host name: equal-cost next-hop ports}} for every switch and host.

    Raises RoutingError naming a switch and a host it cannot reach.
    """
    g = switch_graph(layout)
    table: Dict[str, Dict[str, PortSet]] = {s.name: {} for s in layout.switches}
    for host in layout.hosts:
        direct: Dict[str, List[int]] = {}
        for ln in layout.links_of(host.name):
            far = ln.peer(host.name)
            direct.setdefault(far.node, []).append(far.number)
        dist = nx.multi_source_dijkstra_path_length(g, set(direct))
        for s in layout.switches:
            if s.name in direct:
                table[s.name][host.name] = tuple(sorted(direct[s.name]))
                continue
            if s.name not in dist:
                raise RoutingError(f"switch {s.name!r} has no path to host {host.name!r}")
            closer = {data["ports"][s.name] for _, nbr, data in g.edges(s.name, data=True)
                      if dist.get(nbr) == dist[s.name] - 1}
            table[s.name][host.name] = tuple(sorted(closer))
    return table


def plan_routes(layout: Layout) -> Dict[str, SwitchRoutes]:
    """{switch name: SwitchRoutes} for every switch of ``layout``.

    Hosts of a switch subnet share one "subnet" route at every other switch
    where their next hops agree; otherwise each host gets a "host" /32 route.
    Routes are ordered: host routes by host order, then subnet routes by
    switch order. Raises RoutingError as :func:`next_hop_ports`.
    """
    hops = next_hop_ports(layout)
    members: Dict[str, List[Host]] = {}  # subnet owner -> its hosts
    owners = [s for s in layout.switches if s.subnet is not None]
    for h in layout.hosts:
        ip = ipaddress.IPv4Address(h.ip)
        owner = next((s for s in owners if ip in ipaddress.IPv4Network(s.subnet)), None)
        if owner is not None:
            members.setdefault(owner.name, []).append(h)
    plans: Dict[str, SwitchRoutes] = {}
    for s in layout.switches:
        aggregated = {h.name for t, hs in members.items() if t != s.name
                      and len({hops[s.name][h.name] for h in hs}) == 1 for h in hs}
        routes = [Route(f"{h.ip}/32", hops[s.name][h.name], "host")
                  for h in layout.hosts if h.name not in aggregated]
        routes += [Route(t.subnet, hops[s.name][members[t.name][0].name], "subnet")
                   for t in owners if t.name in members and members[t.name][0].name in aggregated]
        sets = tuple(sorted({r.ports for r in routes if len(r.ports) > 1}))
        plans[s.name] = SwitchRoutes(s.name, tuple(routes), sets)
    return plans



def max_switch_hops(layout: Layout) -> int:
    """Most switches a packet crosses on a shortest path between two hosts (the queues it
    can wait in): 3 on a spine-leaf of 2+ leaves, 5 on a fat-tree, 1 when every host shares
    one switch. Raises RoutingError as :func:`next_hop_ports` if the layout is not connected."""
    g = switch_graph(layout)
    edges = {layout.attachment(h.name).node for h in layout.hosts}
    most = 0
    for a in edges:
        dist = nx.single_source_shortest_path_length(g, a)
        for b in edges:
            if b not in dist:
                raise RoutingError(f"switch {a!r} has no path to switch {b!r}")
            most = max(most, dist[b])
    return most + 1


def max_path_delay_us(layout: Layout, default_us: int = 0) -> int:
    """The most one-way propagation delay, us, on any shortest (fewest-hop, the routes' own) path between
    two hosts: the sum of the delays of its links, each its own ``delay_us`` or ``default_us``
    (topology.model.Link.delay_or). Over the equal-cost paths between two switches the longest counts
    (ECMP may take any of them). ``(max_switch_hops + 1) x default_us`` when no link has its own delay.
    Raises RoutingError as :func:`max_switch_hops` if the layout is not connected."""
    g = switch_graph(layout)
    delay = {}  # (switch, switch) -> most delay of the links between them (parallel links: any may carry)
    for ln in layout.links:
        if ln.a.node in g and ln.b.node in g:
            for pair in ((ln.a.node, ln.b.node), (ln.b.node, ln.a.node)):
                delay[pair] = max(delay.get(pair, 0), ln.delay_or(default_us))
    host_delay: Dict[str, int] = {}  # edge switch -> most delay of a host's first link on it
    for h in layout.hosts:
        ln = layout.links_of(h.name)[0]
        edge = ln.peer(h.name).node
        host_delay[edge] = max(host_delay.get(edge, 0), ln.delay_or(default_us))
    most = 0
    for a in host_delay:
        dist = nx.single_source_shortest_path_length(g, a)
        far = {a: 0}  # switch -> most delay from a on a shortest path (switches in order of distance)
        for v in sorted(dist, key=dist.get)[1:]:
            far[v] = max(far[u] + delay[(u, v)] for u in g.neighbors(v) if dist.get(u) == dist[v] - 1)
        for b in host_delay:
            if b not in dist:
                raise RoutingError(f"switch {a!r} has no path to switch {b!r}")
            most = max(most, host_delay[a] + far[b] + host_delay[b])
    return most


def switch_tiers(layout: Layout) -> Dict[str, int]:
    """{switch name: tier}: 1 for a switch with a host attached, else 1 + hops to the nearest
    such switch (spine-leaf: leaves 1, spines 2; fat-tree: edge 1, aggregation 2, core 3).
    A switch that reaches no host is left out."""
    g = switch_graph(layout)
    first = {layout.attachment(h.name).node for h in layout.hosts}
    return {name: hops + 1 for name, hops in nx.multi_source_dijkstra_path_length(g, first).items()}


def without_links(layout: Layout, dead: Iterable[Tuple[str, str]]) -> Layout:
    """``layout`` minus the links between each pair of switch names in ``dead`` (order-free; every
    parallel link of a pair: a bundle fails as a whole).

    The routes of the result (:func:`plan_routes`) avoid the dead links: a
    failed link or a failed switch (all its links) is routed around on any
    layout. Hosts and switches stay, so port numbers and group ids of live
    links keep their meaning. Raises ValueError naming a pair that is no link
    of ``layout``.
    """
    pairs = {frozenset(p) for p in dead}
    known = {frozenset((ln.a.node, ln.b.node)) for ln in layout.links}
    for p in pairs:
        if p not in known:
            raise ValueError(f"{' <-> '.join(sorted(p))} is not a link of run {layout.run_id}")
    links = tuple(ln for ln in layout.links if frozenset((ln.a.node, ln.b.node)) not in pairs)
    return replace(layout, links=links)
