"""Fat-tree builder (k-ary, three tiers): Al-Fares, Loukissas, Vahdat, "A Scalable,
Commodity Data Center Network Architecture", SIGCOMM 2008, section 3.

k pods, each of k/2 edge and k/2 aggregation switches; (k/2)^2 core switches;
k/2 hosts on every edge switch: k^3/4 hosts, 5k^2/4 switches (k=4: 16 hosts,
20 switches). Every switch uses k ports.

Conventions (pods, switches and hosts numbered from 1):

- edge e of pod p is ``<run_id>e<n>`` with n = (p-1)*k/2 + e, dpid 0x1000+n,
  subnet ``10.p.e.0/24``; aggregation a of pod p is ``<run_id>a<n>``
  (n = (p-1)*k/2 + a), dpid 0x2000+n; core c is ``<run_id>c<c>``, dpid 0x3000+c;
- host j of edge e in pod p is ``<run_id>h<n>``, n = ((p-1)*k/2 + (e-1))*k/2 + j,
  rank n-1 (pod-major, then edge, then host: consecutive ranks share an edge),
  IP ``10.p.e.j`` (the paper's 10.pod.switch.ID with IDs from 1) and MAC
  ``02:00:00:pp:ee:jj`` (hex);
- edge e: host j on port j, aggregation a of its pod on port k/2+a;
  aggregation a: edge e of its pod on port e, core (a-1)*k/2+i on port k/2+i
  (aggregation a of every pod joins the same group of k/2 cores, as in the
  paper's Figure 3); core c: pod p on port p. A host's interface is eth0.

Host links run at ``host_link_bps``; edge-aggregation and aggregation-core
links at ``fabric_link_bps`` (the spec derives it from
``fabric.oversubscription``: an edge switch has k/2 host ports and k/2 uplinks).
"""
from __future__ import annotations

from typing import Any, List, Tuple

from topology.model import DEFAULT_HASH_FIELDS, Host, Layout, Link, Port, Switch

KIND = "fat_tree"
#: fabric keys of this kind (beside the common rates, buffer, MTU, oversubscription)
PARAMS = ("k",)
FABRIC_PREFIX = "10.0.0.0/8"
#: k=8 is 128 hosts and 80 switches, already far past what one 2-core machine emulates faithfully
MAX_K = 8


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k % 2 or not 2 <= k <= MAX_K:
        raise ValueError(f"fabric.k = {k!r}: allowed an even number of ports per switch in 2..{MAX_K} "
                         f"(k=4: 16 hosts, 20 switches)")


def check(fabric: Any) -> None:
    """ValueError naming ``fabric.k`` unless it is even, in 2..MAX_K and at most
    ``fabric.ports_per_switch`` (every switch uses k ports)."""
    _check_k(fabric.k)
    if fabric.k > fabric.ports_per_switch:
        raise ValueError(f"fabric.k = {fabric.k} ports per switch, more than "
                         f"fabric.ports_per_switch = {fabric.ports_per_switch}")


def build(run_id: str, k: int, host_link_bps: float = 10e6, fabric_link_bps: float = 10e6,
          buffer_bytes: int = 100_000) -> Layout:
    """Layout of a k-ary fat-tree (module docstring). Rates in bit/s, buffer in bytes
    (every egress queue). Raises ValueError naming ``fabric.k`` unless it is even, in 2..MAX_K."""
    _check_k(k)
    half = k // 2
    edges: List[Switch] = []
    aggs: List[Switch] = []
    cores = [Switch(f"{run_id}c{c}", 0x3000 + c, "core", c) for c in range(1, half * half + 1)]
    hosts: List[Host] = []
    host_links: List[Link] = []
    fabric_links: List[Link] = []
    for p in range(1, k + 1):
        for e in range(1, half + 1):
            n = (p - 1) * half + e
            edges.append(Switch(f"{run_id}e{n}", 0x1000 + n, "edge", n, f"10.{p}.{e}.0/24"))
            aggs.append(Switch(f"{run_id}a{n}", 0x2000 + n, "aggregation", n))
        for e in range(1, half + 1):
            edge = edges[(p - 1) * half + e - 1].name
            for j in range(1, half + 1):
                n = ((p - 1) * half + e - 1) * half + j
                host = Host(f"{run_id}h{n}", n - 1, f"10.{p}.{e}.{j}", f"02:00:00:{p:02x}:{e:02x}:{j:02x}")
                hosts.append(host)
                host_links.append(Link(Port(host.name, 0), Port(edge, j), float(host_link_bps), buffer_bytes))
            for a in range(1, half + 1):
                agg = aggs[(p - 1) * half + a - 1].name
                fabric_links.append(Link(Port(edge, half + a), Port(agg, e), float(fabric_link_bps), buffer_bytes))
        for a in range(1, half + 1):
            agg = aggs[(p - 1) * half + a - 1].name
            for i in range(1, half + 1):
                fabric_links.append(Link(Port(agg, half + i), Port(cores[(a - 1) * half + i - 1].name, p),
                                         float(fabric_link_bps), buffer_bytes))
    return Layout(run_id, KIND, FABRIC_PREFIX, DEFAULT_HASH_FIELDS, tuple(cores + aggs + edges), tuple(hosts),
                  tuple(host_links + fabric_links))


def edge_ports(fabric: Any) -> Tuple[int, int]:
    """(host ports, uplinks) of an edge switch: (k/2, k/2)."""
    return fabric.k // 2, fabric.k // 2


def from_spec(fabric: Any, run_id: str) -> Layout:
    """:func:`build` from a scenario's ``fabric`` section (k, host_link_bps, fabric_link_bps, buffer_bytes)."""
    return build(run_id, fabric.k, fabric.host_link_bps, fabric.fabric_link_bps, fabric.buffer_bytes)
