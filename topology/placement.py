"""Place a topology's nodes on servers so that the fewest links cross between servers.

Pure (no Mininet, no root): reads a :class:`topology.model.Layout`, returns a
:class:`Placement` (node name -> server name) that Mininet's cluster engine takes through
:func:`testbed.cluster.engine.placer_class`.

Policies (:data:`POLICIES`):

- ``pod``: a *pod* is a connected group of switches and hosts once the top tier is taken
  away (spines of a spine-leaf, cores of a fat-tree: the switches farthest from every host).
  In a spine-leaf every leaf with its hosts is a pod; in a fat-tree a pod is its edge and
  aggregation switches with their hosts, as in Al-Fares et al. (SIGCOMM 2008). Only links to
  the top tier can cross servers.
- ``leaf``: every host-facing switch with its hosts is a unit (a fat-tree's aggregation
  switches then go with the top tier).

Units go to servers in order (consecutive ranks stay together), in contiguous blocks of
nearly equal node count; each remaining switch then goes to the server holding most of its
neighbours, ties to the least loaded server, then to the first listed. A host is always on
the server of the switch it attaches to, so host links never cross.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Set, Tuple

from topology.model import Layout

POLICIES = ("pod", "leaf")


@dataclass(frozen=True)
class Placement:
    """Node name -> server name for every switch and host of a layout, with the policy used."""

    policy: str
    servers: Tuple[str, ...]
    server_of: Mapping[str, str]

    def nodes_on(self, server: str) -> Tuple[str, ...]:
        """Names of the nodes placed on ``server``, in layout order."""
        return tuple(n for n, s in self.server_of.items() if s == server)

    def crossing_links(self, layout: Layout) -> Tuple[Tuple[str, str], ...]:
        """(a, b) node names of every link whose ends are on different servers."""
        return tuple((ln.a.node, ln.b.node) for ln in layout.links
                     if self.server_of[ln.a.node] != self.server_of[ln.b.node])

    def summary(self, layout: Layout) -> Dict[str, object]:
        """JSON-ready description for the run manifest: policy, nodes per server, crossing links."""
        return {"policy": self.policy,
                "servers": {s: list(self.nodes_on(s)) for s in self.servers},
                "crossing_links": [list(ab) for ab in self.crossing_links(layout)]}


def _neighbours(layout: Layout) -> Dict[str, Set[str]]:
    adj: Dict[str, Set[str]] = {n: set() for n in [s.name for s in layout.switches] + [h.name for h in layout.hosts]}
    for ln in layout.links:
        adj[ln.a.node].add(ln.b.node)
        adj[ln.b.node].add(ln.a.node)
    return adj


def _host_distance(layout: Layout, adj: Dict[str, Set[str]]) -> Dict[str, int]:
    """Hops from the nearest host, for every node (breadth-first from all hosts)."""
    dist = {h.name: 0 for h in layout.hosts}
    frontier = list(dist)
    while frontier:
        nxt = []
        for n in frontier:
            for m in sorted(adj[n]):
                if m not in dist:
                    dist[m] = dist[n] + 1
                    nxt.append(m)
        frontier = nxt
    return dist


def _units(layout: Layout, policy: str, adj: Dict[str, Set[str]]) -> Tuple[List[List[str]], List[str]]:
    """(units in layout order, switches left over) for ``policy``."""
    hosts = {h.name for h in layout.hosts}
    order = {name: i for i, name in enumerate([s.name for s in layout.switches] + [h.name for h in layout.hosts])}
    if policy == "leaf":
        members = {s.name for s in layout.switches if adj[s.name] & hosts} | hosts
        grouped = lambda n: [m for m in adj[n] if m in hosts] if n not in hosts else []  # noqa: E731
    else:
        dist = _host_distance(layout, adj)
        top = max((dist.get(s.name, 0) for s in layout.switches), default=0)
        members = {n for n in order if dist.get(n, top) < top} if top > 1 else {s.name for s in layout.switches
                                                                              if adj[s.name] & hosts} | hosts
        grouped = lambda n: [m for m in adj[n] if m in members]  # noqa: E731
    seen: Set[str] = set()
    units: List[List[str]] = []
    for start in sorted((n for n in members if n not in hosts), key=order.__getitem__):
        if start in seen:
            continue
        unit, stack = [], [start]
        seen.add(start)
        while stack:
            n = stack.pop()
            unit.append(n)
            for m in grouped(n):
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        units.append(sorted(unit, key=order.__getitem__))
    units.sort(key=lambda u: order[u[0]] if not any(n in hosts for n in u) else min(order[n] for n in u if n in hosts))
    rest = [s.name for s in layout.switches if s.name not in seen]
    return units, rest


def place(layout: Layout, servers: Sequence[str], policy: str = "pod") -> Placement:
    """Place every node of ``layout`` on one of ``servers`` (module docstring).

    Raises ValueError naming ``policy`` and the allowed ones, or ``servers`` when it is empty
    or repeats a name, or a host that has no link.
    """
    if policy not in POLICIES:
        raise ValueError(f"placement policy {policy!r} is not one of {list(POLICIES)}")
    servers = tuple(servers)
    if not servers or len(set(servers)) != len(servers) or not all(isinstance(s, str) and s for s in servers):
        raise ValueError(f"servers = {list(servers)!r}: give one or more distinct non-empty server names")
    adj = _neighbours(layout)
    for h in layout.hosts:
        if not adj[h.name]:
            raise ValueError(f"host {h.name!r} has no link: it cannot be placed")
    units, rest = _units(layout, policy, adj)
    load: Counter = Counter({s: 0 for s in servers})
    server_of: Dict[str, str] = {}
    total = sum(len(u) for u in units)
    done = 0
    for unit in units:  # contiguous blocks: unit k goes where its first node falls in the total order
        server = servers[min(len(servers) - 1, (done * len(servers)) // max(total, 1))]
        for n in unit:
            server_of[n] = server
        load[server] += len(unit)
        done += len(unit)
    for name in rest:  # top tier: beside most neighbours, then least loaded, then first listed
        near = Counter(server_of[m] for m in adj[name] if m in server_of)
        server = min(servers, key=lambda s: (-near[s], load[s], servers.index(s)))
        server_of[name] = server
        load[server] += 1
    for h in layout.hosts:  # a host without a unit (policy leaf: none) follows its switch
        if h.name not in server_of:
            server_of[h.name] = server_of[next(iter(sorted(adj[h.name])))]
    ordered = {n: server_of[n] for n in [s.name for s in layout.switches] + [h.name for h in layout.hosts]}
    return Placement(policy, servers, ordered)
