"""Load-balancing policies of the controller: how an ECMP select group spreads flows.

One policy per module in this package, one entry in :data:`POLICIES`, chosen
by name in the scenario (``load_balance: {policy: ecmp}``), handed to the
controller as ``load_balance.policy`` of its settings (controllers.contract.LoadBalanceSettings).
A policy with parameters declares them as ``Settings`` in its module (a frozen dataclass whose
fields use traffic.registry.setting; :func:`settings_class`): they are keys of the
scenario's ``load_balance`` section next to ``policy``, validated against it by
the testbed's spec (testbed.spec.controller.LoadBalanceSpec.settings).

The interface is one function: given the layout, the switch, one set of
equal-cost next-hop ports (as :func:`topology.routing.plan_routes` found
them) and the scenario's ``load_balance.weights`` (next-hop switch name ->
weight; empty unless the policy uses them), return the :class:`SelectGroup` for that set: one bucket per port with
its weight, and how the switch picks a bucket (the OVS selection method and
the header fields it hashes). :mod:`controllers.ofplan` turns it into the
group plan; :mod:`controllers.ofmsg` into the OpenFlow 1.5 group-mod.

Pure Python: no os-ken/Ryu import, so the testbed validates the name and unit
tests check a policy without a switch.

To add a policy: write ``controllers/lb/<name>.py`` with a ``select_group``
function of the :data:`Policy` shape (and its ``Settings`` if it has parameters)
and add the module to :data:`POLICIES`.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Dict, Mapping, Tuple

from topology.model import Layout, Switch
from topology.routing import PortSet, switch_tiers
from traffic.registry import NoSettings

#: OVS selection methods (``selection_method=`` of a group; lib/ofp-group.c).
SELECTION_METHODS = ("hash", "dp_hash")


@dataclass(frozen=True)
class SelectGroup:
    """What a policy decides for one equal-cost port set.

    ``buckets``: ``(port, weight)`` pairs in bucket order (weight a relative
    integer 1..65535, OpenFlow 1.5 bucket weight property); ``method``: OVS
    selection method, one of :data:`SELECTION_METHODS`; ``hash_fields``: OXM
    field names the method hashes (empty for ``dp_hash``); ``basis``: the hash
    basis (OVS ``selection_method_param``, u64). Switches that one path meets
    in turn need different bases: with the same fields, basis and bucket ids
    they repeat each other's choice (hash polarization; :func:`tier_basis`).
    """

    buckets: Tuple[Tuple[int, int], ...]
    method: str
    hash_fields: Tuple[str, ...]
    basis: int = 0


def tier_basis(layout: Layout, switch: Switch) -> int:
    """Hash basis of ``switch``: its tier minus 1 (topology.routing.switch_tiers: host-facing
    switches 0, the next tier up 1, ...).

    Why: OVS's ``hash`` method seeds the field hash with the basis and picks the
    bucket with the highest ``hash(bucket_id, seed)`` (ofproto-dpif-xlate.c), so
    two switches with the same basis and bucket ids send a flow to the same
    bucket index. On a fat-tree every flow an edge switch sent to its first
    aggregation switch (bucket 0) then left that switch on bucket 0 too: one of
    its two cores carried all its up traffic (seen on the real fabric:
    72 packets vs 0 after an all-pairs ping). A path crosses each tier at most
    once going up, so one basis per tier decorrelates the choices; host-facing
    switches keep basis 0, so a spine-leaf fabric's groups are unchanged.
    """
    return switch_tiers(layout).get(switch.name, 1) - 1


#: ``load_balance.hash_basis``: how each switch's hash basis (its seed) is chosen (:func:`switch_basis`)
HASH_BASES = ("per_tier", "per_switch", "same")
DEFAULT_HASH_BASIS = "per_tier"
DEFAULT_SELECTION_METHOD = "hash"
#: OVS_HASH_ALG_L4 (datapath/linux/compat/include/linux/openvswitch.h): the 5-tuple hash of dp_hash;
#: the high 32 bits of a dp_hash group's selection_method_param (ofproto/ofproto-dpif.c)
OVS_HASH_ALG_L4 = 0
#: the policies whose groups the ``dp_hash`` selection method may build (the adaptive one moves buckets by
#: the ``hash`` method's per-flow counters and is not checked with dp_hash)
DP_HASH_POLICIES = ("ecmp", "weighted")


@dataclass(frozen=True)
class Hashing:
    """How every select group hashes, whatever the policy (``load_balance.hash_basis`` and
    ``load_balance.selection_method``).

    ``basis``: ``per_tier`` (the default: :func:`tier_basis`), ``per_switch`` (a seed of the switch's
    own, its datapath id, as switch vendors seed ECMP hashing per box) or ``same`` (basis 0 on every
    switch: the hash polarization a fabric shows when every switch runs the same hash function with
    the same seed). ``method``: ``hash`` (OVS hashes the policy's fields, then takes the bucket with the
    highest ``hash(bucket_id, flow hash)``: a highest-random-weight choice) or ``dp_hash`` (the
    datapath's 5-tuple hash, ports included, indexes a table of 16+ slots filled with the buckets
    in turn, so with 2 or 4 equal buckets the bucket is ``hash mod n``, as a switch ASIC picks an
    ECMP member from its hash bits; ofproto/ofproto-dpif.c ``group_setup_dp_hash_table``).
    """

    basis: str = DEFAULT_HASH_BASIS
    method: str = DEFAULT_SELECTION_METHOD

    def __post_init__(self) -> None:
        if self.basis not in HASH_BASES:
            raise ValueError(f"load_balance.hash_basis = {self.basis!r} is not one of {', '.join(HASH_BASES)}")
        if self.method not in SELECTION_METHODS:
            raise ValueError(f"load_balance.selection_method = {self.method!r} is not one of "
                             f"{', '.join(SELECTION_METHODS)}")


def switch_basis(layout: Layout, switch: Switch, basis: str) -> int:
    """The hash basis of ``switch`` under ``load_balance.hash_basis`` = ``basis`` (:class:`Hashing`):
    its tier minus 1, its dpid (low 32 bits: dp_hash takes a 32-bit basis) or 0."""
    if basis == "per_tier":
        return tier_basis(layout, switch)
    if basis == "per_switch":
        return switch.dpid & 0xFFFFFFFF
    return 0


def rehash(select: SelectGroup, layout: Layout, switch: Switch, hashing: Hashing) -> SelectGroup:
    """``select`` (a policy's buckets) with the basis and selection method of ``hashing``. For ``dp_hash``
    the fields go (the datapath hashes the 5-tuple) and the basis is the low 32 bits of the OVS
    selection-method parameter, the hash algorithm (:data:`OVS_HASH_ALG_L4`) its high 32 bits."""
    basis = switch_basis(layout, switch, hashing.basis)
    if hashing.method == "dp_hash":
        return SelectGroup(select.buckets, "dp_hash", (), (OVS_HASH_ALG_L4 << 32) | basis)
    return SelectGroup(select.buckets, select.method, select.hash_fields, basis)


def check_hashing(policy: str, hashing: Hashing) -> None:
    """ValueError naming ``load_balance.selection_method`` when ``dp_hash`` is asked of a policy not in
    :data:`DP_HASH_POLICIES`."""
    if hashing.method == "dp_hash" and policy not in DP_HASH_POLICIES:
        raise ValueError(f"load_balance.selection_method = dp_hash: policy {policy!r} is not supported with it; "
                         f"allowed with: {', '.join(DP_HASH_POLICIES)}")


#: A policy: (layout, switch, equal-cost ports, weights by next-hop switch name) -> SelectGroup.
Policy = Callable[[Layout, Switch, PortSet, Mapping[str, int]], SelectGroup]

#: The policies that read ``load_balance.weights`` (the others refuse them).
WEIGHTED_POLICIES = ("weighted",)
#: The policies whose groups the controller changes during a run from port telemetry
#: (controllers/adaptive_app.py; ``load_balance.poll_period_ms``, ``hot_threshold``, ``min_dwell_ms``).
ADAPTIVE_POLICIES = ("adaptive",)


def _registry() -> Dict[str, ModuleType]:
    from controllers.lb import adaptive, ecmp, weighted

    return {"ecmp": ecmp, "weighted": weighted, "adaptive": adaptive}


#: name -> the policy's module (its ``select_group``, its ``Settings`` if any); the names are what
#: ``load_balance.policy`` allows.
POLICIES: Dict[str, ModuleType] = _registry()
DEFAULT_POLICY = "ecmp"


def names() -> Tuple[str, ...]:
    """The policy names a scenario may give, sorted."""
    return tuple(sorted(POLICIES))


def settings_class(name: str) -> type:
    """The settings dataclass of the policy called ``name`` (traffic.registry.NoSettings when it has
    none). Raises ValueError naming ``load_balance.policy`` and the allowed names."""
    get(name)
    return getattr(POLICIES[name], "Settings", NoSettings)


def check_weights(layout: Layout, policy: str, weights: Mapping[str, int]) -> None:
    """Raise ValueError naming ``load_balance.weights`` unless ``weights`` suit ``policy`` and ``layout``:
    only the :data:`WEIGHTED_POLICIES` take weights; every name is a switch of the layout (without the
    run id, e.g. ``s1``); every weight is a whole number from 1 to 65535."""
    if not weights:
        return
    if policy not in WEIGHTED_POLICIES:
        raise ValueError(f"load_balance.weights: policy {policy!r} does not use weights; the policies that do: "
                         f"{', '.join(WEIGHTED_POLICIES)}")
    names = sorted(s.name[len(layout.run_id):] for s in layout.switches)
    for name, w in weights.items():
        if name not in names:
            raise ValueError(f"load_balance.weights: {name!r} is not a switch of this fabric; allowed: "
                             f"{', '.join(names)}")
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 65535:
            raise ValueError(f"load_balance.weights.{name}: {w!r} is not a whole number from 1 to 65535")
    _check_weights_apply(layout, weights)


def _check_weights_apply(layout: Layout, weights: Mapping[str, int]) -> None:
    """Every weighted switch is one of several equal-cost next hops somewhere (else its weight changes
    nothing), and every group's reduced weights fit in its buckets (weighted.bucket_counts)."""
    from controllers.lb.weighted import bucket_counts, next_hop_names, next_hop_weights
    from topology.routing import next_hop_ports

    hops = set()
    for sw_name, table in next_hop_ports(layout).items():
        switch = layout.switch(sw_name)
        for ports in set(table.values()):
            if len(ports) > 1:
                hops.update(next_hop_names(layout, switch, ports))
                bucket_counts(next_hop_weights(layout, switch, ports, weights))
    unused = sorted(set(weights) - hops)
    if unused:
        raise ValueError(f"load_balance.weights: {unused[0]!r} is never one of several equal-cost next hops on "
                         f"this fabric, so its weight would change nothing; switches that are: "
                         f"{', '.join(sorted(hops)) or 'none (a single path everywhere)'}")


def get(name: str) -> Policy:
    """The policy called ``name``. Raises ValueError naming ``load_balance.policy`` and the allowed names."""
    try:
        return POLICIES[name].select_group
    except KeyError:
        raise ValueError(f"load_balance.policy: unknown policy {name!r}; allowed: {', '.join(names())}") from None
