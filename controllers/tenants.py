"""Tenant isolation: which host may reach which, and the ingress drop flows that enforce it.

Pure Python (no os-ken, no root; Python >= 3.9: the Ryu controller's too), shared by the
controller (controllers.ofplan, controllers.app) and the testbed (testbed.spec.tenants,
testbed.tenants).

The rule (:func:`allowed`): a packet from host ``src`` to host ``dst`` is allowed when either
of them is a shared host (a storage or service host every tenant may reach, and which may
answer any of them), or when both belong to the same tenant. A host in no tenant and not shared
reaches only the shared hosts (the scenario validation refuses such hosts while isolation is
on; a jobs placement may leave some idle).

Enforcement (:func:`drop_flows`): on each switch a host is attached to (its ingress leaf), one
flow per forbidden destination host: ``in_port=<host port>, ipv4, ipv4_dst=<dst>`` with no
actions (drop), at :data:`PRIO_TENANT_DROP`, above the host routes. Each drop is a flow of its
own, so its OpenFlow counters (n_packets, n_bytes) count what isolation dropped for that
(source host, destination host) pair: the testbed sums them per tenant pair
(testbed.tenants.drop_counters). The match is on the ingress port, not the source address, so a
host cannot escape by spoofing its source. Proxy ARP answers only allowed pairs
(controllers.ofplan.proxy_arp_mac), and the hosts' static neighbour entries hold only allowed
peers (testbed.emulation.fabric), so a host never learns another tenant's MAC.

Spoofing (:func:`guard_flows`): a host port admits only the host's own addresses. ARP goes to the
controller only with the host's ``eth_src`` and ``arp_spa`` (any other ARP meets the table-miss drop);
IPv4 to a destination the host may reach passes only with the host's ``eth_src`` and ``ipv4_src``
(one admit flow per allowed destination, at :data:`PRIO_TENANT_ADMIT`, with that destination's route
as actions: controllers.ofplan); every other IPv4 packet from the port (a forged source) meets one
counted drop per port at :data:`PRIO_TENANT_SPOOF_DROP`, below the pair drops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Iterable, List, Mapping, Optional, Tuple

#: Priority of the isolation drops: above the host routes (controllers.ofplan.PRIO_HOST_ROUTE, 200),
#: below ARP to the controller (300) and the LLDP drop (400).
PRIO_TENANT_DROP = 250
#: Priority of a host port's admit flows (its own sources to a destination it may reach): above the drops.
PRIO_TENANT_ADMIT = 260
#: Priority of a host port's drop of every other IPv4 packet (a forged source): below the pair drops, above
#: the host routes.
PRIO_TENANT_SPOOF_DROP = 245
#: The ``purpose`` label of a port's spoof drop: ``tenant-spoof-drop-<host>``.
SPOOF_PURPOSE_PREFIX = "tenant-spoof-drop-"
#: The ``purpose`` label of an isolation drop: ``tenant-drop-<src>-<dst>`` (short host names).
DROP_PURPOSE_PREFIX = "tenant-drop-"


def allowed(host_tenant: Mapping[str, str], shared: Iterable[str], src: str, dst: str) -> bool:
    """True when ``src`` may send to ``dst`` (host names, both the same form, e.g. without the run id).

    ``host_tenant``: host -> tenant name; ``shared``: hosts every tenant may reach (and that may reach
    every host). A host never forms a pair with itself (False). Rule: either is shared, or both are in
    the same tenant; a host in no tenant reaches only the shared hosts."""
    if src == dst:
        return False
    shared = set(shared)
    if src in shared or dst in shared:
        return True
    t = host_tenant.get(src)
    return t is not None and t == host_tenant.get(dst)


def allowed_pairs(hosts: Iterable[str], host_tenant: Mapping[str, str], shared: Iterable[str]
                  ) -> FrozenSet[Tuple[str, str]]:
    """Every ordered (src, dst) pair of ``hosts`` (src != dst) that :func:`allowed` allows."""
    hosts, shared = list(hosts), set(shared)
    return frozenset((a, b) for a in hosts for b in hosts if allowed(host_tenant, shared, a, b))


@dataclass(frozen=True)
class TenantFilter:
    """What the controller enforces: ``host_tenant`` (host name without the run id -> tenant) and
    ``shared`` (host names without the run id), for the layout of run ``run_id``."""

    run_id: str
    host_tenant: Mapping[str, str]
    shared: FrozenSet[str]

    def short(self, name: str) -> str:
        """``tb12abh3`` -> ``h3`` (names of this run; others unchanged)."""
        return name[len(self.run_id):] if name.startswith(self.run_id) else name

    def allows(self, src: str, dst: str) -> bool:
        """:func:`allowed` on two host names (with or without the run id)."""
        return allowed(self.host_tenant, self.shared, self.short(src), self.short(dst))

    def tenant_of(self, host: str) -> Optional[str]:
        """The host's tenant; None for a shared host or one in no tenant."""
        return self.host_tenant.get(self.short(host))


def drop_flow_purpose(src: str, dst: str) -> str:
    """The ``purpose`` label of the drop from ``src`` to ``dst`` (short names)."""
    return f"{DROP_PURPOSE_PREFIX}{src}-{dst}"


def drop_flows(layout, switch: str, flt: TenantFilter) -> List[Tuple[int, Tuple[Tuple[str, object], ...], str]]:
    """The isolation drops of ``switch`` in ``layout`` (a topology.model.Layout, or one plane's view of it:
    topology.planes.views): ``[(priority, match, purpose)]``, one per (host attached to the switch,
    host of the layout it may not reach), the match ``in_port, eth_type=IPv4, ipv4_dst`` (os-ken
    OFPMatch keyword order). Empty for a switch without hosts."""
    out = []
    for host, port in layout.hosts_on(switch):
        for dst in layout.hosts:
            if dst.name != host.name and not flt.allows(host.name, dst.name):
                match = (("in_port", port), ("eth_type", 0x0800), ("ipv4_dst", dst.ip))
                out.append((PRIO_TENANT_DROP, match, drop_flow_purpose(flt.short(host.name), flt.short(dst.name))))
    return out


def arp_match(host, port: int) -> Tuple[Tuple[str, object], ...]:
    """The match of ``host``'s ARP to the controller on its switch ``port`` under isolation: its own
    ``eth_src`` and ``arp_spa`` only (os-ken OFPMatch keywords)."""
    return (("in_port", port), ("eth_type", 0x0806), ("eth_src", host.mac), ("arp_spa", host.ip))


def guard_flows(layout, switch: str, flt: TenantFilter) -> List[Tuple[int, Tuple[Tuple[str, object], ...], str, Optional[str]]]:
    """The anti-spoofing flows of ``switch``'s host ports (module docstring): ``[(priority, match, purpose,
    dst_ip)]``: an admit flow per (host, destination it may reach) with ``dst_ip`` (its actions are that
    destination's route: controllers.ofplan), then one drop per host port (``dst_ip`` None). Empty for a
    switch without hosts."""
    out = []
    for host, port in layout.hosts_on(switch):
        src = (("in_port", port), ("eth_src", host.mac), ("eth_type", 0x0800), ("ipv4_src", host.ip))
        for dst in layout.hosts:
            if dst.name != host.name and flt.allows(host.name, dst.name):
                out.append((PRIO_TENANT_ADMIT, src + (("ipv4_dst", dst.ip),),
                            f"tenant-admit-{flt.short(host.name)}-{flt.short(dst.name)}", dst.ip))
        out.append((PRIO_TENANT_SPOOF_DROP, (("in_port", port), ("eth_type", 0x0800)),
                    SPOOF_PURPOSE_PREFIX + flt.short(host.name), None))
    return out


def tenant_pair(host_tenant: Mapping[str, str], shared: Iterable[str], host: str) -> str:
    """The label of ``host`` in tenant-pair tables: its tenant, ``shared``, or ``none``."""
    if host in set(shared):
        return "shared"
    return host_tenant.get(host, "none")


def filter_from_settings(run_id: str, settings) -> Optional[TenantFilter]:
    """The :class:`TenantFilter` of a controllers.contract.TenantSettings (None: no isolation)."""
    if settings is None:
        return None
    return TenantFilter(run_id, dict(settings.host_tenant), frozenset(settings.shared_hosts))


__all__ = ["DROP_PURPOSE_PREFIX", "PRIO_TENANT_ADMIT", "PRIO_TENANT_DROP", "PRIO_TENANT_SPOOF_DROP",
           "SPOOF_PURPOSE_PREFIX", "TenantFilter", "allowed", "allowed_pairs", "arp_match", "drop_flow_purpose",
           "drop_flows", "guard_flows", "filter_from_settings", "tenant_pair"]
