"""Traffic patterns: sets of flows between hosts for load-balancing and congestion studies.

A pattern kind is a function ``build(p, hosts, seed) -> list[Flow]`` (``p``: the scenario's
testbed.spec.pattern.PatternSpec, ``hosts``: every host as a :class:`HostInfo`, in rank order,
``seed``: the scenario's seed) registered in :data:`PATTERNS`. To add one: a module here with its
``build`` and an entry below (and its keys in testbed.spec.pattern.KIND_KEYS).

Flows are numbered 0.. in the order built; each is one message on each of its ``qps`` queue pairs
from ``src`` to ``dst`` (:func:`qp_shares` splits its bytes; QP c is the agents' channel c). Two flows
of one host pair and direction would share those QPs: refused.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from traffic.collectives.channels import channel_sizes


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
    qps: int = 1


def qp_shares(size_bytes: int, qps: int) -> list[int]:
    """Bytes each of a flow's ``qps`` queue pairs carries: ``size_bytes`` split into ``qps`` shares differing by
    at most one byte, larger first (traffic.collectives.channels.channel_sizes, NCCL's split over channels).

    Raises ValueError unless 1 <= qps <= MAX_CHANNELS and size_bytes >= qps (every QP carries a byte)."""
    if size_bytes < qps:
        raise ValueError(f"a flow of {size_bytes} B cannot be split over {qps} queue pairs: each carries >= 1 byte")
    return channel_sizes(size_bytes, qps)


def resolve(ref, hosts: Sequence[HostInfo], key: str) -> int:
    """The rank of a host reference (a rank or a name like ``h3``); PatternError naming ``key`` otherwise."""
    if isinstance(ref, int):
        if 0 <= ref < len(hosts):
            return ref
        raise PatternError(f"{key} = {ref}: a rank is 0..{len(hosts) - 1} among the pattern's hosts")
    for h in hosts:
        if h.name == ref:
            return h.rank
    names = [h.name for h in hosts]
    raise PatternError(f"{key} = {ref!r} is not one of the pattern's hosts: allowed {names[0]} .. {names[-1]} "
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
    if p.kind != "flows":  # explicit flows carry their own qps (explicit.build)
        flows = [replace(f, qps=getattr(p, "qps", 1)) for f in flows]
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
