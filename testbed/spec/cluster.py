"""The ``cluster`` section: one fabric split over several servers (docs/cluster.md).

``cluster: {servers: [srv1, srv2], placement: pod}`` names the servers (ssh host names or
addresses the driver and every server can reach, docs/cluster.md "Setting up N real
machines") and the placement policy of topology.placement (``pod`` or ``leaf``).
``testbed run --servers a,b --placement pod`` overrides it (testbed.spec.cluster.with_cluster).
Without the section the run is on this machine only.

(``fabric.servers`` is something else: rail_optimized's count of GPU servers.)
"""
from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, field_validator

from topology.placement import POLICIES
from traffic.transport.entropy import ENTROPY_POLICIES
from testbed.spec.units import SpecModel

#: a server name: an ssh host name (RFC 1123 labels) or an IPv4 address, at most 253 characters
SERVER_NAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                            r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
MAX_SERVERS = 64

Policy = Literal[POLICIES]  # type: ignore[valid-type]


class ClusterSpec(SpecModel):
    """Servers and placement policy of a run split over several servers.

    ``servers``: 1..MAX_SERVERS distinct host names (or IPv4 addresses); ``placement``: ``pod``
    (default: only links to the top tier cross servers) or ``leaf`` (topology.placement).
    """

    servers: tuple[str, ...] = Field(min_length=1, max_length=MAX_SERVERS)
    placement: Policy = "pod"

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in servers if not SERVER_NAME_RE.match(s)]
        if bad:
            raise ValueError(f"server name {bad[0]!r} is not a host name or IPv4 address "
                             f"(letters, digits, '-' and '.', at most 253 characters)")
        dup = sorted({s for s in servers if servers.count(s) > 1})
        if dup:
            raise ValueError(f"server {dup[0]!r} is listed twice: give each server once")
        return servers


def parse_servers(text: str) -> tuple[str, ...]:
    """``a,b,c`` (``testbed run --servers``) -> ("a", "b", "c"); ValueError for an empty list or an
    empty name (the names themselves are checked by :class:`ClusterSpec`)."""
    names = tuple(s.strip() for s in text.split(","))
    if not text.strip() or any(not s for s in names):
        raise ValueError(f"--servers {text!r}: give one or more server names separated by commas, e.g. srv1,srv2")
    return names


def check_cluster(spec) -> None:
    """A ScenarioSpec's ``cluster`` section against its fabric and the features a cluster run has
    (:func:`_cluster_features`): ValueError naming the key. No section: nothing to check."""
    c = spec.cluster
    if c is None:
        return
    refused = [key for key, used in _cluster_features(spec).items() if used]
    if refused:
        raise ValueError(f"cluster: {', '.join(refused)} not supported in a run over several servers (yet); "
                         f"run it on one machine (no cluster section, no --servers) or leave "
                         f"{'it' if len(refused) == 1 else 'them'} out")
    from topology.placement import place
    place(spec.fabric.layout_preview(), c.servers, c.placement)  # every host placeable (ValueError otherwise)


def _cluster_features(spec) -> dict:
    """key -> whether ``spec`` uses a feature a cluster run does not offer yet."""
    from testbed.spec.jobs import cluster_kinds

    f = spec.fabric
    return {"fabric.datapath: kernel": f.datapath == "kernel",
            "fabric.queue_backend other than htb_bfifo": f.queue_backend != "htb_bfifo",
            **{f"fabric.{key}": bool(delay_us) for key, delay_us in f.delays_us.items()},  # netem: not yet
            "congestion.ecn": spec.congestion.ecn is not None,
            "congestion.pfc": spec.congestion.pfc is not None,
            "controller.framework: ryu": spec.controller.framework != "os_ken",
            "faults": bool(spec.faults), "background": bool(spec.background), "tenants": bool(spec.tenants),
            **cluster_kinds(spec), "output.pcap": spec.output.pcap is not None,
            f"transport.entropy: {spec.transport.entropy} (traces paths on the switches)":
                ENTROPY_POLICIES[spec.transport.entropy].uses_paths}


def with_cluster(spec, servers: Optional[tuple[str, ...]] = None, placement: Optional[str] = None):
    """``spec`` (a ScenarioSpec) with its ``cluster`` section replaced by the command line's: ``servers``
    (None: the scenario's) and ``placement`` (None: the scenario's, else ``pod``), checked as the section is.

    Raises testbed.spec.yaml_loader.ScenarioError naming ``--servers``/``--placement`` and what is allowed;
    ``--placement`` without servers in either place is refused too.
    """
    from pydantic import ValidationError

    from testbed.spec.yaml_loader import ScenarioError

    if servers is None and placement is None:
        return spec
    base = spec.cluster
    if servers is None and base is None:
        raise ScenarioError("--placement needs servers: give --servers a,b or a cluster.servers list in the scenario")
    section = {"servers": list(servers if servers is not None else base.servers),
               "placement": placement or (base.placement if base is not None else "pod")}
    try:
        cluster = ClusterSpec.model_validate(section)
    except ValidationError as e:
        first = e.errors()[0]
        key = "--placement" if first["loc"][:1] == ("placement",) else "--servers"
        msg = first["msg"].removeprefix("Value error, ")
        if key == "--placement":
            msg = f"{placement!r} is not a placement policy; allowed: {', '.join(POLICIES)}"
        raise ScenarioError(f"{key}: {msg}") from None
    out = spec.model_copy(update={"cluster": cluster})
    try:
        check_cluster(out)
    except ValueError as e:
        raise ScenarioError(f"--servers: {e}") from None
    return out
