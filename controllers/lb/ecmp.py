"""``ecmp``: per-flow hashing over equal buckets (the testbed's behaviour before policies existed).

Every equal-cost port gets one bucket of weight :data:`BUCKET_WEIGHT`; the
switch hashes the layout's ``ecmp_hash_fields`` (by default the 5-tuple with
the UDP and TCP ports, so the RoCEv2 UDP source port, the entropy field,
spreads flows) with the OVS ``hash`` selection method. Without the fields OVS
would hash only L2/L3 and every RoCEv2 flow between two hosts would land in
one bucket (docs/architecture.md, "Facts about the machines").
"""
from __future__ import annotations

from typing import Mapping

from topology.model import Layout, Switch
from topology.routing import PortSet

from controllers.lb import SelectGroup, tier_basis

#: Weight of every bucket. 100 leaves room for weighted policies (e.g. 50/150) on the same scale.
BUCKET_WEIGHT = 100


def select_group(layout: Layout, switch: Switch, ports: PortSet, weights: Mapping[str, int] = {}) -> SelectGroup:
    """Equal buckets over ``ports`` (in order), hashing ``layout.ecmp_hash_fields`` with the
    switch's tier basis (:func:`controllers.lb.tier_basis`); ``weights`` unused."""
    return SelectGroup(tuple((port, BUCKET_WEIGHT) for port in ports), "hash", tuple(layout.ecmp_hash_fields),
                       tier_basis(layout, switch))
