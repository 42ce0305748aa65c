"""``alltoall``: every host sends ``size_bytes`` to every other host, all n(n-1) flows at once (MoE
expert-parallel dispatch as concurrent flows; the collective with steps is traffic.collectives.alltoall)."""
from __future__ import annotations

from traffic.patterns import Flow


def build(p, hosts, seed: int) -> list[Flow]:
    pairs = [(a.rank, b.rank) for a in hosts for b in hosts if a.rank != b.rank]
    return [Flow(i, s, d, int(p.size_bytes)) for i, (s, d) in enumerate(pairs)]
