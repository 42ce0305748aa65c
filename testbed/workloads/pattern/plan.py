"""A pattern's flows on a fabric layout, checked before anything is built.

Hosts are named as in scenario ``faults``: the layout's name without the run id (``h1``), or by rank.
"""
from __future__ import annotations

from testbed.spec.hosts import host_infos
from topology.model import Layout
from traffic.patterns import Flow, build_flows
from traffic.transport import payload_efficiency

#: seconds to start a trial's agents (processes, QPs, ready) and collect their records, measured here
#: (8 agents, 2 cores shared with other jobs: 1.5-2.5 s); used by the estimate only
TRIAL_OVERHEAD_S = 2.5


def pattern_flows(spec, layout: Layout) -> list[Flow]:
    """The flows of ``spec.workload.pattern`` on ``layout`` (traffic.patterns.build_flows).

    Raises traffic.patterns.PatternError (a ValueError) naming the key when they do not fit."""
    return build_flows(spec.workload.pattern, host_infos(layout), spec.seed)


def pattern_peers(flows: list[Flow]) -> dict[int, list[int]]:
    """rank -> the ranks it needs queue pairs with: the other end of each of its flows (either direction)."""
    peers: dict[int, set] = {}
    for f in flows:
        peers.setdefault(f.src, set()).add(f.dst)
        peers.setdefault(f.dst, set()).add(f.src)
    return {r: sorted(p) for r, p in peers.items()}


def estimate_s(spec) -> float:
    """Seconds the pattern's trials take: per trial, the ideal completion time of its flows
    (testbed.workloads.pattern.ideal) plus :data:`TRIAL_OVERHEAD_S`."""
    from testbed.workloads.pattern.ideal import ideal_fct_s
    layout = spec.fabric.layout_preview()
    flows = pattern_flows(spec, layout)
    fct = ideal_fct_s(flows, layout, payload_efficiency(spec.transport.payload_bytes))
    span = max(f.start_s + fct[f.flow] for f in flows)
    return spec.workload.pattern.trials * (span + TRIAL_OVERHEAD_S)


def check_pattern_peers(spec, layout: Layout) -> dict[int, list[int]]:
    """:func:`pattern_peers` of the scenario's pattern on the run's ``layout`` (for the transport's send
    buffers)."""
    return pattern_peers(pattern_flows(spec, layout))


def flows_fan_in(flows: list[Flow]) -> int:
    """Most queue pairs sending to one receiver at once: a flow of ``qps`` N counts N (each QP has its own
    window in flight); 1 without flows."""
    per_dst: dict[int, int] = {}
    for f in flows:
        per_dst[f.dst] = per_dst.get(f.dst, 0) + f.qps
    return max(per_dst.values(), default=1)
