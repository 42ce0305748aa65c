"""Traffic patterns: sets of flows between hosts for load-balancing and congestion studies.

A pattern kind is a function ``build(p, hosts, seed) -> list[Flow]`` (``p``: the scenario's
testbed.spec.pattern.PatternSpec, ``hosts``: every host as a :class:`HostInfo`, in rank order,
``seed``: the scenario's seed) registered in :data:`PATTERNS`. To add one: a module here with its
``build`` and an entry below (and its keys in testbed.spec.pattern.KIND_KEYS).

Flows are numbered 0.. in the order built; each is one message on the queue pair from ``src`` to
``dst`` (one QP per host pair and direction, so two flows of one pair would share it: refused).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


class PatternError(ValueError):
    """A pattern that cannot run on this fabric; the message names the key (``workload.pattern.<key>``)."""


@dataclass(frozen=True)
class HostInfo:
    """A host as patterns see it: ``name`` without the run id (``h1``), ``rank`` (0-based) and the name of
    the switch it hangs off (``switch``, without the run id: its leaf or edge switch)."""

    name: str
    rank: int
    switch: str


@dataclass(frozen=True)
class Flow:
    """One flow: ``size_bytes`` of payload from rank ``src`` to rank ``dst``, starting ``start_s`` after
    the trial's start. ``flow``: its number in the pattern."""

    flow: int
    src: int
    dst: int
    size_bytes: int
    start_s: float = 0.0


def resolve(ref, hosts: Sequence[HostInfo], key: str) -> int:
    """The rank of a host reference (a rank or a name like ``h3``); PatternError naming ``key`` otherwise."""
    if isinstance(ref, int):
        if 0 <= ref < len(hosts):
            return ref
        raise PatternError(f"{key} = {ref}: a rank is 0..{len(hosts) - 1} on this fabric")
    for h in hosts:
        if h.name == ref:
            return h.rank
    names = [h.name for h in hosts]
    raise PatternError(f"{key} = {ref!r} is not a host of this fabric: allowed {names[0]} .. {names[-1]} "
                       f"or a rank 0..{len(hosts) - 1}")


def by_switch(hosts: Sequence[HostInfo]) -> dict[str, list[HostInfo]]:
    """Hosts grouped by the switch they hang off, switches in the order of their first host."""
    out: dict[str, list[HostInfo]] = {}
    for h in hosts:
        out.setdefault(h.switch, []).append(h)
    return out


def _build(kind: str) -> Callable:
    from traffic.patterns import alltoall, explicit, incast, kflows, permutation
    return {"permutation": permutation.build, "alltoall": alltoall.build, "kflows": kflows.build,
            "incast": incast.build, "flows": explicit.build}[kind]


#: kind -> its module's ``build``
PATTERNS = ("permutation", "alltoall", "kflows", "incast", "flows")


def build_flows(p, hosts: Sequence[HostInfo], seed: int) -> list[Flow]:
    """The flows of pattern ``p`` on ``hosts`` (module docstring). Raises PatternError naming the key when
    the pattern does not fit the fabric, or when two flows share a source and destination."""
    flows = _build(p.kind)(p, list(hosts), seed)
    pairs: dict[tuple[int, int], int] = {}
    for f in flows:
        if f.src == f.dst:
            raise PatternError(f"workload.pattern.flows.{f.flow}: src and dst are the same host "
                               f"({hosts[f.src].name})")
        if (f.src, f.dst) in pairs:
            raise PatternError(f"workload.pattern.flows.{f.flow}: {hosts[f.src].name} -> {hosts[f.dst].name} "
                               f"repeats flow {pairs[(f.src, f.dst)]}: one queue pair per host pair carries one "
                               f"flow; merge them or use another pair")
        pairs[(f.src, f.dst)] = f.flow
    return flows
