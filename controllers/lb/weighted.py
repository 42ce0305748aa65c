"""``weighted``: per-flow hashing with each next hop's share of flows set by a weight.

Open vSwitch does not give a select-group bucket a share of flows in
proportion to its weight. For the ``hash`` (and the default) selection method
it scores every live bucket as ``(hash_int(bucket_id, basis) & 0xffff) *
weight`` and takes the highest score (ofproto/ofproto-dpif-xlate.c,
``group_best_live_bucket``): a highest-random-weight rule with multiplied
weights. With two buckets of weights 1 and 3 and a uniform hash the light one
wins only when h1 > 3 h2, for 1/6 = 16.7% of flows, not the 25% the weights
say (measured: ``benchmarks/ovs_bucket_weights.py``).

What is fair under that rule is equal weights: every bucket then wins for
1/n of the flows. So this policy gives each next hop as many equal-weight
buckets as its weight (weights reduced by their greatest common divisor),
and a next hop's share of flows is its weight over the sum of weights. The
weights are per next-hop switch name (``load_balance.weights``, e.g.
``{s1: 1, s2: 3}`` on a spine-leaf fabric), 1 for a switch not named.
"""
from __future__ import annotations

from functools import reduce
from math import gcd
from typing import Mapping, Tuple

from topology.model import Layout, Switch
from topology.routing import PortSet

from controllers.lb import SelectGroup, tier_basis
from controllers.lb.ecmp import BUCKET_WEIGHT

#: Most buckets one group gets: the reduced weights of its next hops must sum to no more.
MAX_BUCKETS = 256


def next_hop_weights(layout: Layout, switch: Switch, ports: PortSet, weights: Mapping[str, int]) -> Tuple[int, ...]:
    """The weight of each port's far-end switch (by :func:`short_name`; 1 for one not in ``weights``),
    in port order."""
    return tuple(int(weights.get(name, 1)) for name in next_hop_names(layout, switch, ports))


def next_hop_names(layout: Layout, switch: Switch, ports: PortSet) -> Tuple[str, ...]:
    """The far-end node of each of ``switch``'s ``ports`` (by :func:`short_name`), in port order."""
    far = {}
    for ln in layout.links_of(switch.name):
        end = ln.a if ln.a.node == switch.name else ln.b
        far[end.number] = short_name(layout, ln.peer(switch.name).node)
    return tuple(far[p] for p in ports)


def short_name(layout: Layout, node: str) -> str:
    """A node's name without the run id it starts with (``tb12cds1`` -> ``s1``): the name a scenario uses."""
    return node[len(layout.run_id):] if node.startswith(layout.run_id) else node


def bucket_counts(port_weights: Tuple[int, ...]) -> Tuple[int, ...]:
    """Equal-weight buckets per port: the weights divided by their greatest common divisor.

    Raises ValueError when a weight is below 1 or the buckets would exceed :data:`MAX_BUCKETS`.
    """
    if any(w < 1 for w in port_weights):
        raise ValueError(f"load_balance.weights: every weight must be >= 1, got {list(port_weights)}")
    g = reduce(gcd, port_weights)
    counts = tuple(w // g for w in port_weights)
    if sum(counts) > MAX_BUCKETS:
        raise ValueError(f"load_balance.weights: weights {list(port_weights)} need {sum(counts)} buckets in one "
                         f"group; at most {MAX_BUCKETS} (use smaller whole numbers)")
    return counts


def select_group(layout: Layout, switch: Switch, ports: PortSet, weights: Mapping[str, int]) -> SelectGroup:
    """Equal-weight buckets, each port repeated as often as its next hop's reduced weight; hashing
    ``layout.ecmp_hash_fields`` with the OVS ``hash`` method."""
    counts = bucket_counts(next_hop_weights(layout, switch, ports, weights))
    buckets = tuple((port, BUCKET_WEIGHT) for port, k in zip(ports, counts) for _ in range(k))
    return SelectGroup(buckets, "hash", tuple(layout.ecmp_hash_fields), tier_basis(layout, switch))
