"""``kflows``: k long flows from the first k hosts of the first leaf to the first k hosts of the last
leaf, all at once; with k spines, k flows on k equal paths (the ECMP collision experiment).

k defaults to the hosts the first and last leaves both have (set ``hosts_per_leaf`` = ``spines`` for k
flows on k paths); balls into bins: 1 - (1 - 1/k)^k of the paths carry a flow on average.
"""
from __future__ import annotations

from traffic.patterns import Flow, PatternError, by_switch


def build(p, hosts, seed: int) -> list[Flow]:
    groups = list(by_switch(hosts).values())
    if len(groups) < 2:
        raise PatternError("workload.pattern.kind 'kflows' needs hosts on at least two leaves")
    src, dst = groups[0], groups[-1]
    k = p.k or min(len(src), len(dst))
    if k > min(len(src), len(dst)):
        raise PatternError(f"workload.pattern.k = {k}: the first and last leaves have {len(src)} and {len(dst)} "
                           f"hosts; allowed 1..{min(len(src), len(dst))}")
    return [Flow(i, src[i].rank, dst[i].rank, int(p.size_bytes)) for i in range(k)]
