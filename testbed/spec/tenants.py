"""Tenants: which hosts belong to whom, which are shared, and the isolation the controller enforces.

Scenario keys (all optional, top level)::

    tenants:                     # tenant name -> its hosts (names as in faults: h1.. hN)
      alpha: {hosts: [h1, h2, h3, h4]}
      beta:  {hosts: [h5], traffic_class: lossy}   # default class of beta's jobs (a job's own wins)
    shared_hosts: [h6]           # hosts every tenant may reach (a storage server); in no tenant
    isolation: on                # on | off (true | false); default on when tenants are given

With isolation on, each host reaches only its own tenant's hosts and the shared hosts (and a
shared host reaches everyone): the controller drops everything else at the sender's ingress leaf
with a counted flow and answers ARP only within the allowed pairs (controllers.tenants), and the
run proves it with probes that must fail (testbed.tenants.probes). With isolation off the tenants
only label hosts (no drops, no probes).

Rules, each a ScenarioError naming the key path: a tenant needs at least one host; hosts must be
hosts of this fabric; a host is in at most one tenant; a shared host is in no tenant;
``shared_hosts`` and ``isolation: on`` need ``tenants``. With isolation on, every host must be in a
tenant or shared (a host in neither could reach only the shared hosts, which is rarely what was
meant): the message names the hosts left out. A scenario whose ``jobs`` place hosts at plan time
(another section) leaves that check to :func:`tenant_map` with the jobs' placements as ``extra``.

:func:`tenant_map` is the one pure entry point: spec (+ extra host -> tenant assignments) ->
:class:`TenantMap` (host -> tenant, shared hosts, the allowed ordered host pairs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Union

from pydantic import Field

from controllers.tenants import allowed, allowed_pairs
from testbed.spec.units import SpecModel
from testbed.spec.yaml_loader import ScenarioError

#: tenant names: letters, digits, ``_.-``; ``shared`` and ``none`` are the labels of shared and unplaced hosts
TENANT_NAME_RE = r"^[A-Za-z0-9_.-]{1,32}$"
RESERVED_TENANT_NAMES = ("shared", "none")

Isolation = Union[bool, Literal["on", "off"]]


class TenantSpec(SpecModel):
    """One tenant: its hosts (short names, ``h1``..) and the default traffic class of its jobs (``lossless``
    or ``lossy``: the DSCP of their RoCE data packets, testbed.spec.jobs; a job's own ``traffic_class`` wins)."""

    hosts: tuple[str, ...] = Field(..., min_length=1)
    #: default ``traffic_class`` of the tenant's jobs (None: lossless); only with a ``jobs`` list
    traffic_class: Optional[Literal["lossless", "lossy"]] = None


@dataclass(frozen=True)
class TenantMap:
    """Who is whom, for one run.

    ``hosts``: every host of the fabric (short names, in rank order); ``host_tenant``: host -> tenant
    for the hosts in a tenant; ``shared_hosts``: hosts every tenant may reach; ``isolation``: the
    controller enforces :meth:`allows` (False: every pair is allowed); ``tenants``: tenant -> its
    hosts (rank order)."""

    hosts: tuple[str, ...]
    host_tenant: Mapping[str, str]
    shared_hosts: tuple[str, ...]
    isolation: bool
    tenants: Mapping[str, tuple[str, ...]]

    def allows(self, src: str, dst: str) -> bool:
        """May ``src`` send to ``dst`` (short names)? Always True without isolation (src != dst)."""
        if not self.isolation:
            return src != dst
        return allowed(self.host_tenant, self.shared_hosts, src, dst)

    def allowed_pairs(self) -> frozenset[tuple[str, str]]:
        """Every ordered (src, dst) host pair that may exchange packets (src != dst)."""
        if not self.isolation:
            return frozenset((a, b) for a in self.hosts for b in self.hosts if a != b)
        return allowed_pairs(self.hosts, self.host_tenant, self.shared_hosts)

    def label(self, host: str) -> str:
        """The host's tenant, ``shared`` or ``none`` (tables and summary.json)."""
        return "shared" if host in self.shared_hosts else self.host_tenant.get(host, "none")


def isolation_on(spec) -> bool:
    """The scenario's isolation setting: ``isolation`` if given, else on exactly when tenants are given."""
    iso = spec.isolation
    if iso is None:
        return bool(spec.tenants)
    return iso is True or iso == "on"


def _fabric_hosts(spec) -> list[str]:
    layout = spec.fabric.layout_preview()
    rid = layout.run_id
    return [h.name[len(rid):] for h in sorted(layout.hosts, key=lambda h: h.rank)]


def _fail(path: str, why: str):
    raise ScenarioError(f"{path}: {why}")


def tenant_map(spec, extra: Optional[Mapping[str, str]] = None, require_all_placed: Optional[bool] = None
               ) -> TenantMap:
    """The run's :class:`TenantMap` from a scenario spec (testbed.spec.scenario.ScenarioSpec); pure.

    ``extra``: more host -> tenant assignments (short host names), e.g. the hosts a ``jobs:`` placement
    chose at plan time for a job of that tenant; each tenant must be declared in ``tenants``, each host
    a host of the fabric, not shared, and not already in another tenant (the same tenant again is fine).
    ``require_all_placed``: refuse hosts in no tenant and not shared while isolation is on (default:
    on, unless the scenario lists jobs and no ``extra`` is given: the jobs' placement is not known yet).

    Raises ScenarioError naming the key path (``tenants.<name>.hosts``, ``shared_hosts``, ``isolation``,
    ``extra.<host>``) and what is allowed."""
    hosts = _fabric_hosts(spec)
    known = set(hosts)
    allowed_text = f"allowed: {', '.join(hosts)}"
    iso = isolation_on(spec)
    if not spec.tenants:
        if spec.shared_hosts:
            _fail("shared_hosts", "shared hosts are shared among tenants: list the tenants under `tenants:`")
        if iso:
            _fail("isolation", "isolation needs tenants: list them under `tenants:` (or leave isolation out)")
        if extra:
            _fail(f"extra.{next(iter(extra))}", "assigns a tenant, but the scenario declares none under `tenants:`")
    host_tenant: dict[str, str] = {}
    for name, t in spec.tenants.items():
        if not re.match(TENANT_NAME_RE, name):
            _fail(f"tenants.{name}", "a tenant name is 1-32 letters, digits or _.-")
        if name in RESERVED_TENANT_NAMES:
            _fail(f"tenants.{name}", f"{name!r} is reserved (the label of {name} hosts); pick another tenant name")
        for i, h in enumerate(t.hosts):
            path = f"tenants.{name}.hosts.{i}"
            if h not in known:
                _fail(path, f"{h!r} is not a host of this fabric; {allowed_text}")
            if h in host_tenant:
                other = host_tenant[h]
                _fail(path, f"{h} is already in tenant {other!r}" if other != name else f"{h} is listed twice")
            host_tenant[h] = name
    shared: list[str] = []
    for i, h in enumerate(spec.shared_hosts):
        path = f"shared_hosts.{i}"
        if h not in known:
            _fail(path, f"{h!r} is not a host of this fabric; {allowed_text}")
        if h in host_tenant:
            _fail(path, f"{h} is in tenant {host_tenant[h]!r}; a shared host belongs to no tenant (remove it "
                        f"from tenants.{host_tenant[h]}.hosts or from shared_hosts)")
        if h in shared:
            _fail(path, f"{h} is listed twice")
        shared.append(h)
    for h, name in (extra or {}).items():
        path = f"extra.{h}"
        if h not in known:
            _fail(path, f"{h!r} is not a host of this fabric; {allowed_text}")
        if name not in spec.tenants:
            _fail(path, f"tenant {name!r} is not declared; allowed: {', '.join(spec.tenants)}")
        if h in shared:
            _fail(path, f"{h} is a shared host (shared_hosts); it cannot join tenant {name!r}")
        if host_tenant.get(h, name) != name:
            _fail(path, f"{h} is in tenant {host_tenant[h]!r}; a host belongs to one tenant, not also {name!r}")
        host_tenant[h] = name
    if require_all_placed is None:
        require_all_placed = not (getattr(spec, "jobs", None) and extra is None)
    left = [h for h in hosts if h not in host_tenant and h not in shared]
    if iso and require_all_placed and left:
        _fail("tenants", f"with isolation on every host must be in a tenant or in shared_hosts; "
                         f"{', '.join(left)} {'is' if len(left) == 1 else 'are'} in neither: add "
                         f"{'it' if len(left) == 1 else 'them'} to a tenant's hosts or to shared_hosts, "
                         f"or set isolation: off")
    tenants = {name: tuple(h for h in hosts if host_tenant.get(h) == name) for name in spec.tenants}
    return TenantMap(hosts=tuple(hosts), host_tenant=dict(host_tenant), shared_hosts=tuple(shared),
                     isolation=iso, tenants=tenants)


def check_peers(tmap: TenantMap, peers: Mapping[int, list]) -> None:
    """Refuse a workload whose ranks exchange traffic across tenants while isolation is on: its packets
    would be dropped by design and the run would only time out. ``peers``: rank -> the ranks it has queue
    pairs with (testbed.workloads.base.Workload.peers); rank r is ``tmap.hosts[r]``. Raises ScenarioError
    naming ``workload`` and the first such pair."""
    if not tmap.isolation:
        return
    for rank in sorted(peers):
        for peer in sorted(peers[rank]):
            a, b = tmap.hosts[rank], tmap.hosts[peer]
            if a != b and not tmap.allows(a, b):
                _fail("workload", f"ranks {rank} ({a}, tenant {tmap.label(a)}) and {peer} ({b}, tenant "
                                  f"{tmap.label(b)}) exchange traffic, which isolation drops: run the workload "
                                  f"within one tenant (and shared hosts), e.g. workload.ranks over hosts of one "
                                  f"tenant, or set isolation: off")


def check_tenants(spec) -> None:
    """Scenario validation: :func:`tenant_map` when the scenario has tenants, shared hosts or isolation set.
    Raises ValueError (its message starts with the key path) for the scenario's error collector."""
    if not (spec.tenants or spec.shared_hosts or spec.isolation is not None):
        return
    try:
        tenant_map(spec)
    except ScenarioError as e:
        raise ValueError(str(e)) from None


__all__ = ["Isolation", "TenantMap", "TenantSpec", "check_peers", "check_tenants", "isolation_on", "tenant_map"]
