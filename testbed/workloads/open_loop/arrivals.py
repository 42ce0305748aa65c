"""Open-loop flows: Poisson arrivals at each host at a target load of its link, sizes from a flow-size CDF.

As HPCC's traffic generator (alibaba-edu/High-Precision-Congestion-Control, traffic_gen/traffic_gen.py):
every host's flows arrive as a Poisson process of mean inter-arrival

    mean_interarrival_s = mean_size_bytes x 8 / (load x host_link_bps)

(mean_size_bytes: the CDF's mean x size_scale), so a host offers ``load`` of its link's bit rate in payload;
each flow goes to a uniformly drawn other host. The hosts' processes are merged in time order (HPCC's heap)
until ``duration_s`` of arrivals or ``flows`` flows. Arrival gaps, sizes and destinations come from three
generators seeded (seed, 0), (seed, 1), (seed, 2), so one seed gives the same sizes at every load.

Lanes: the k-th flow of a host pair (in arrival order) runs on queue pair k mod ``lanes`` of that pair
(traffic.protocol.FlowOrder.channel), queued behind the earlier flows of its lane.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional

import numpy as np

from testbed.workloads.open_loop.cdf import FlowSizeCdf


@dataclass(frozen=True)
class OpenFlow:
    """Flow ``flow``: ``size_bytes`` from rank ``src`` to rank ``dst``, arriving ``start_s`` after the traffic's
    start, on lane ``channel`` of the pair."""

    flow: int
    src: int
    dst: int
    size_bytes: int
    start_s: float
    channel: int


def mean_interarrival_s(mean_size_bytes: float, load: float, link_bps: float) -> float:
    """Mean gap between one host's flow arrivals, s: mean_size_bytes x 8 / (load x link_bps) (module docstring).
    Raises ValueError unless 0 < load < 1 and the size and rate are positive."""
    if not 0 < load < 1:
        raise ValueError(f"load = {load}: allowed 0 < load < 1")
    if mean_size_bytes <= 0 or link_bps <= 0:
        raise ValueError(f"mean size {mean_size_bytes} B and link rate {link_bps} bit/s must be positive")
    return mean_size_bytes * 8 / (load * link_bps)


def open_loop_flows(cdf: FlowSizeCdf, n_hosts: int, load: float, link_bps: float, size_scale: float, seed: int,
                    lanes: int, duration_s: Optional[float] = None, flows: Optional[int] = None) -> list[OpenFlow]:
    """The flows of ``n_hosts`` hosts (ranks 0..n_hosts-1) in arrival order (module docstring): until
    ``duration_s`` of arrivals, or the first ``flows`` flows (exactly one given). Raises ValueError for fewer
    than 2 hosts, both or neither of duration_s and flows, or a load outside (0, 1)."""
    if n_hosts < 2:
        raise ValueError(f"open-loop flows need 2 or more hosts, the fabric has {n_hosts}")
    if (duration_s is None) == (flows is None):
        raise ValueError("give exactly one of duration_s and flows")
    gap_s = mean_interarrival_s(cdf.mean_bytes * size_scale, load, link_bps)
    gaps, sizes, dsts = (np.random.default_rng([seed, k]) for k in range(3))
    heap = [(float(gaps.exponential(gap_s)), h) for h in range(n_hosts)]
    heapq.heapify(heap)
    out: list[OpenFlow] = []
    per_pair: dict[tuple[int, int], int] = {}
    while heap and (flows is None or len(out) < flows):
        t, src = heapq.heappop(heap)
        if duration_s is not None and t > duration_s:
            continue  # this host's arrivals are over
        dst = int(dsts.integers(n_hosts - 1))
        dst += dst >= src
        k = per_pair.get((src, dst), 0)
        per_pair[(src, dst)] = k + 1
        out.append(OpenFlow(len(out), src, dst, int(cdf.sample_bytes(sizes, 1, size_scale)[0]), t, k % lanes))
        heapq.heappush(heap, (t + float(gaps.exponential(gap_s)), src))
    return out


def expected_span_s(cdf: FlowSizeCdf, n_hosts: int, load: float, link_bps: float, size_scale: float,
                    duration_s: Optional[float], flows: Optional[int]) -> float:
    """Expected seconds of arrivals: ``duration_s``, or ``flows`` x the mean gap / ``n_hosts`` (the merged
    processes' rate), s."""
    if duration_s is not None:
        return duration_s
    return flows * mean_interarrival_s(cdf.mean_bytes * size_scale, load, link_bps) / n_hosts
