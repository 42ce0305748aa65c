"""OpenFlow 1.5 plan of every switch, built from the shared topology model.

The testbed writes the run's topology file with :func:`topology.model.save`
(path in the controller's settings, controllers.contract.ControllerSettings.topology_file); the
controller reads it with :func:`topology.model.load` and :func:`plan_fabric`
turns the routes of :func:`topology.routing.plan_routes` (equal-cost shortest
paths on any layout, networkx) into the exact rules and groups each switch
needs. Everything here is pure Python (no os-ken, no root), so the plan is
unit tested without a switch; :mod:`controllers.ofmsg` turns it into
OpenFlow messages.

Plan of every switch (proactive L3, no flooding, no MAC learning):

* table-miss drop; LLDP dropped; ARP from host ports to the controller
  (proxy ARP);
* ``ipv4_dst=<host>`` (/32) routes; ``ipv4_dst`` in the switch's own subnet
  but no known host: drop (a packet never bounces back into the fabric);
* ``ipv4_dst=<switch subnet>`` routes toward the hosts of another switch;
* with tenant isolation (:mod:`controllers.tenants`), on a host's ingress switch
  one counted drop per destination host it may not reach, above the host routes; its ARP
  reaches the controller only from its own MAC and address, its IPv4 passes only from them
  (an admit flow per allowed destination, with that destination's route) and anything else
  from its port (a forged source) meets a counted drop;
* a route with one next hop outputs to that port; a route with several
  equal-cost next hops goes to the select group of that port set (one group
  per distinct set, group ids from 1), whose buckets, weights and selection
  method the load-balancing policy decides (:mod:`controllers.lb`; ``ecmp``
  hashes the 5-tuple including the UDP ports over equal buckets).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Mapping

from controllers import lb
from controllers import tenants as tenancy
from topology.model import Layout
from topology import planes
from topology.routing import PortSet, SwitchRoutes, plan_routes

# --------------------------------------------------------------------------
# Constants: OpenFlow / OVS numbers used by the plan
# --------------------------------------------------------------------------

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC

#: Flow priorities (higher wins). Host /32 beats the local-subnet drop, which
#: beats the subnet routes.
PRIO_TABLE_MISS = 0
PRIO_SUBNET_ROUTE = 100
PRIO_LOCAL_SUBNET_DROP = 150
PRIO_HOST_ROUTE = 200
PRIO_ARP_TO_CONTROLLER = 300
PRIO_LLDP_DROP = 400

#: Cookie on every flow this app installs ("tb" in ASCII), so its rules are
#: recognisable in ``ovs-ofctl dump-flows``.
FLOW_COOKIE = 0x7462

#: OpenFlow "controller" output max_len meaning "send the whole packet".
OFPCML_NO_BUFFER = 0xFFFF


# --------------------------------------------------------------------------
# Forwarding plan
# --------------------------------------------------------------------------

#: An action in a plan: ("output", port) | ("group", group_id) |
#: ("controller", max_len_bytes). An empty action tuple means drop.
Action = Tuple[str, int]
#: A match in a plan: os-ken ``OFPMatch`` keyword arguments in order; a masked
#: IPv4 value is an (address, netmask) tuple.
Match = Tuple[Tuple[str, Any], ...]


@dataclass(frozen=True)
class FlowPlan:
    """One flow entry for table 0."""

    priority: int
    match: Match
    actions: Tuple[Action, ...]
    purpose: str  # short label used in logs and error reports

    @property
    def is_drop(self) -> bool:
        return not self.actions


@dataclass(frozen=True)
class BucketPlan:
    """One select-group bucket: forward out ``port`` with relative ``weight``."""

    bucket_id: int
    port: int
    weight: int


@dataclass(frozen=True)
class GroupPlan:
    """A SELECT group over ``buckets``; the switch picks one by ``selection_method``
    (OVS: "hash" over ``hash_fields``, OXM names; or "dp_hash")."""

    group_id: int
    buckets: Tuple[BucketPlan, ...]
    hash_fields: Tuple[str, ...]
    selection_method: str = "hash"
    hash_basis: int = 0  # OVS selection_method_param (controllers.lb.SelectGroup.basis)


@dataclass(frozen=True)
class SwitchPlan:
    """Everything one switch gets: groups first (flows reference them), then flows."""

    dpid: int
    name: str
    role: str
    groups: Tuple[GroupPlan, ...]
    flows: Tuple[FlowPlan, ...]


def _drop(priority: int, match: Match, purpose: str) -> FlowPlan:
    return FlowPlan(priority, match, (), purpose)


def _prefix_match(prefix: str) -> Tuple[str, str]:
    net = ipaddress.IPv4Network(prefix)
    return (str(net.network_address), str(net.netmask))


def _forward(routes: SwitchRoutes, ports: PortSet) -> Tuple[Action, ...]:
    """One output action for a single next hop, else the ECMP select group of the port set."""
    if len(ports) == 1:
        return (("output", ports[0]),)
    return (("group", routes.group_id(ports)),)


def plan_group(group_id: int, select: lb.SelectGroup) -> GroupPlan:
    """The group plan of a policy's decision: bucket ids 0.. in the policy's order."""
    return GroupPlan(group_id, tuple(BucketPlan(i, port, weight) for i, (port, weight) in enumerate(select.buckets)),
                     select.hash_fields, select.method, select.basis)


def plan_switch(layout: Layout, routes: SwitchRoutes, policy: lb.Policy = lb.get(lb.DEFAULT_POLICY),
                lb_weights: Mapping[str, int] = {}, tenants: Optional[tenancy.TenantFilter] = None,
                hashing: lb.Hashing = lb.Hashing()) -> SwitchPlan:
    """Flows and groups of switch ``routes.switch`` from its routes (topology.routing);
    ``policy`` (:mod:`controllers.lb`) sets each select group's buckets, given ``lb_weights``
    (next-hop switch name -> weight, for the weighted policies);
    ``tenants``: the isolation drops of the switch's hosts (controllers.tenants.drop_flows; None: none);
    ``hashing`` the hash basis and selection method of every group (controllers.lb.rehash).

    KeyError if the switch is not in ``layout``.
    """
    sw = layout.switch(routes.switch)
    subnet_owner = {s.subnet: s.name for s in layout.switches if s.subnet}
    flows = [
        _drop(PRIO_TABLE_MISS, (), "table-miss-drop"),
        _drop(PRIO_LLDP_DROP, (("eth_type", ETH_TYPE_LLDP),), "lldp-drop"),
    ]
    for host, port in layout.hosts_on(sw.name):
        flows.append(FlowPlan(
            PRIO_ARP_TO_CONTROLLER,
            (("in_port", port), ("eth_type", ETH_TYPE_ARP)) if tenants is None else tenancy.arp_match(host, port),
            (("controller", OFPCML_NO_BUFFER),),
            f"arp-from-{host.name}",
        ))
    for r in routes.routes:
        if r.via == "host":
            host = layout.host_by_ip(r.prefix.split("/")[0])
            flows.append(FlowPlan(PRIO_HOST_ROUTE, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", host.ip)),
                                  _forward(routes, r.ports), f"host-{host.name}"))
    if tenants is not None:
        flows += [_drop(prio, match, purpose) for prio, match, purpose in tenancy.drop_flows(layout, sw.name, tenants)]
    if sw.subnet:
        flows.append(_drop(
            PRIO_LOCAL_SUBNET_DROP,
            (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(sw.subnet))),
            "local-subnet-unknown-drop",
        ))
    for r in routes.routes:
        if r.via == "subnet":
            flows.append(FlowPlan(PRIO_SUBNET_ROUTE, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", _prefix_match(r.prefix))),
                                  _forward(routes, r.ports), f"route-{subnet_owner[r.prefix]}"))
    if tenants is not None:
        flows += _guards(layout, sw.name, tenants, routes)
    groups = tuple(plan_group(routes.group_id(ports), lb.rehash(policy(layout, sw, ports, lb_weights), layout, sw,
                                                                hashing))
                   for ports in routes.ecmp_sets)
    return SwitchPlan(sw.dpid, sw.name, sw.role, groups, tuple(flows))


def _guards(layout: Layout, switch: str, tenants: tenancy.TenantFilter, routes: SwitchRoutes) -> list:
    """The anti-spoofing flows of ``switch`` (controllers.tenants.guard_flows), each admit flow forwarding as the
    switch's most specific route to its destination does (none: left out)."""
    out = []
    for prio, match, purpose, dst_ip in tenancy.guard_flows(layout, switch, tenants):
        if dst_ip is None:
            out.append(_drop(prio, match, purpose))
            continue
        addr = ipaddress.IPv4Address(dst_ip)
        covering = [r for r in routes.routes if addr in ipaddress.IPv4Network(r.prefix)]
        if covering:
            best = max(covering, key=lambda r: ipaddress.IPv4Network(r.prefix).prefixlen)
            out.append(FlowPlan(prio, match, _forward(routes, best.ports), purpose))
    return out


def plan_fabric(layout: Layout, lb_policy: str = lb.DEFAULT_POLICY,
                lb_weights: Mapping[str, int] = {}, tenants: Optional[tenancy.TenantFilter] = None,
                hashing: lb.Hashing = lb.Hashing()) -> Dict[int, SwitchPlan]:
    """Return {dpid: SwitchPlan} for every switch in ``layout``, select groups by the
    load-balancing policy named ``lb_policy`` (:data:`controllers.lb.POLICIES`) with
    ``lb_weights`` (``load_balance.weights``: switch name without the run id -> weight), hashed as
    ``hashing`` says (``load_balance.hash_basis`` and ``selection_method``; controllers.lb.Hashing);
    ``tenants``: tenant isolation to enforce (:mod:`controllers.tenants`; None: none).

    Raises topology.routing.RoutingError if some switch cannot reach some host,
    ValueError naming ``load_balance.policy`` for an unknown policy or
    ``load_balance.weights`` for weights given to a policy that does not use them,
    naming a switch the layout lacks, or below 1.
    """
    policy = lb.get(lb_policy)
    lb.check_weights(layout, lb_policy, lb_weights)
    lb.check_hashing(lb_policy, hashing)
    plans: Dict[int, SwitchPlan] = {}
    for view in planes.views(layout):  # each plane (and scale-up domain) routed on its own
        routes = plan_routes(view)
        plans.update((sw.dpid, plan_switch(view, routes[sw.name], policy, lb_weights, tenants, hashing))
                     for sw in view.switches)
    return plans


def proxy_arp_mac(layout: Layout, dpid: int, in_port: int, sender_ip: str, target_ip: str,
                  tenants: Optional[tenancy.TenantFilter] = None) -> Optional[str]:
    """MAC to answer an ARP request with, or None to stay silent.

    Answers for any host IP of the fabric asked from a host port of switch
    ``dpid``, except when the asker asks about its own address (gratuitous
    ARP, RFC 5227 probes/announcements): there a reply would read as an
    address conflict. Unknown targets and non-host ports get no reply; with
    ``tenants``, neither does a target the asker may not reach.
    """
    sw = layout.switch_by_dpid(dpid)
    if sw is None:
        return None
    layout = planes.view_of(layout, sw.name)  # the addresses of the asker's plane
    asker = next((h for h, port in layout.hosts_on(sw.name) if port == in_port), None)
    if asker is None or target_ip == asker.ip or target_ip == sender_ip:
        return None
    target = layout.host_by_ip(target_ip)
    if target is None or (tenants is not None and not tenants.allows(asker.name, target.name)):
        return None
    return target.mac
