"""The ``output.pcap`` section: which ports to capture with tcpdump during the run, snap length, size cap.

Port names are those of the scenario's fabric without the run id:

- a host NIC: ``h1`` (its first interface, ``h1-eth0``) or ``h1-eth1`` (a further NIC);
- a switch port by interface: ``l1-eth3`` (OpenFlow port 3 of leaf l1);
- a switch port by link: ``l1-s1`` (the port of ``l1`` that faces ``s1``; ``l1-h1``: the port facing h1);
- ``all``: every host NIC and every switch port.

:func:`resolve_ports` checks the names against a topology.model.Layout (the scenario
does so before anything is built: testbed.spec.scenario) and returns one
:class:`CapturePort` per interface to capture.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from pydantic import Field, field_validator

from testbed.spec.units import Count, SizeBytes, SpecModel

#: tcpdump's snap length bounds: 64 bytes hold Ethernet + IPv4 + UDP + BTH (54) and a PFC frame's class vector
MIN_SNAPLEN_BYTES, MAX_SNAPLEN_BYTES = 64, 262144
#: smallest size cap: 100 KB of captures in all
MIN_PCAP_BYTES = 100_000
_INTF_RE = re.compile(r"^(?P<node>[a-z][a-z0-9]*)-eth(?P<port>[0-9]+)$")


class PcapSpec(SpecModel):
    """``output.pcap``: ``ports`` (names above, at least one), ``snaplen_bytes`` (bytes kept of each frame,
    64..262144, default 128: headers, BTH, CNP and PFC fields), ``max_bytes`` (cap on all capture files
    together, default 50MB, split evenly over the ports: a port's capture stops once its file reaches its
    share, checked every 0.1 s)."""

    ports: tuple[str, ...] = Field(min_length=1)
    snaplen_bytes: Count = Field(128, ge=MIN_SNAPLEN_BYTES, le=MAX_SNAPLEN_BYTES)
    max_bytes: SizeBytes = Field(50_000_000, ge=MIN_PCAP_BYTES)

    @field_validator("ports")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dup = sorted({p for p in v if v.count(p) > 1})
        if dup:
            raise ValueError(f"named more than once: {', '.join(dup)}")
        return v


@dataclass(frozen=True)
class CapturePort:
    """One interface to capture: ``port`` its name without the run id (``h1-eth0``, ``l1-eth3``; also the
    file name pcap/<port>.pcap), ``asked`` the name the scenario used, ``intf`` the real interface name,
    ``host`` the Mininet host whose namespace holds it (None: a switch port, root namespace)."""

    port: str
    asked: str
    intf: str
    host: Optional[str]


def resolve_ports(layout, ports) -> list[CapturePort]:
    """The interfaces ``ports`` (names of :class:`PcapSpec`) stand for on ``layout`` (topology.model.Layout),
    in layout order, each once.

    Raises ValueError naming ``output.pcap.ports.<i>``, the bad name and what is allowed.
    """
    rid = layout.run_id
    switches = {s.name for s in layout.switches}
    by_intf: dict[str, Optional[str]] = {}  # short interface name -> host (None: switch port)
    by_link: dict[str, str] = {}  # "l1-s1" -> "l1-eth3"
    bundle: dict[str, list[str]] = {}  # "l1-s1" -> every member's interface (parallel links: several)
    for h in layout.hosts:
        by_intf[h.name[len(rid):] + "-eth0"] = h.name
        for nic in layout.nics_of(h.name):
            by_intf[nic.intf[len(rid):]] = h.name
    for ln in layout.links:
        for end, other in ((ln.a, ln.b), (ln.b, ln.a)):
            if end.node in switches:
                short = f"{end.node[len(rid):]}-eth{end.number}"
                by_intf[short] = None
                by_link.setdefault(f"{end.node[len(rid):]}-{other.node[len(rid):]}", short)
                bundle.setdefault(f"{end.node[len(rid):]}-{other.node[len(rid):]}", []).append(short)
    hosts = {h.name[len(rid):]: h.name[len(rid):] + "-eth0" for h in layout.hosts}
    chosen: dict[str, str] = {}
    for i, name in enumerate(ports):
        if name == "all":
            for short in by_intf:
                chosen.setdefault(short, "all")
            continue
        if len(bundle.get(name, ())) > 1:
            raise ValueError(f"output.pcap.ports.{i}: {name!r} names {len(bundle[name])} parallel links "
                             f"(fabric.links_per_spine); name each interface instead: {', '.join(bundle[name])}")
        short = hosts.get(name) or by_link.get(name) or (name if name in by_intf else None)
        if short is None:
            raise ValueError(f"output.pcap.ports.{i}: {name!r} is not a port of this fabric; allowed: all, a host "
                             f"({_few(hosts)}), a host or switch interface ({_few(by_intf)}) or a switch port by "
                             f"link ({_few(by_link)})")
        if chosen.get(short, "all") == "all":  # an explicit name wins over all
            chosen[short] = name
    return [CapturePort(port=short, asked=asked, intf=rid + short, host=by_intf[short])
            for short, asked in sorted(chosen.items(), key=lambda kv: _order(kv[0]))]


def _order(short: str) -> tuple:
    m = _INTF_RE.match(short)
    node = m.group("node") if m else short
    return (node[0] != "h", re.sub(r"[0-9]+", lambda d: d.group().zfill(6), node), int(m.group("port")) if m else 0)


def _few(names, n: int = 6) -> str:
    names = sorted(names, key=_order) if names and all(_INTF_RE.match(x) for x in names) else sorted(names)
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")
