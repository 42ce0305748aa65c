"""An open-loop run's plan, before anything is built: its CDF, its flows on the fabric's hosts, their ideal
FCTs, the slowdown buckets' edges and the estimate."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.workloads.open_loop.arrivals import OpenFlow, mean_interarrival_s, open_loop_flows
from testbed.workloads.open_loop.cdf import FlowSizeCdf, read_cdf
from testbed.workloads.open_loop.standalone import idle_paths, standalone_fct_s

#: seconds to start the agents (processes, QPs, ready) and collect their records (as a pattern trial's,
#: testbed.workloads.pattern.plan.TRIAL_OVERHEAD_S); used by the estimate only
RUN_OVERHEAD_S = 2.5


@dataclass(frozen=True)
class OpenLoopPlan:
    """``cdf`` read, ``flows`` in arrival order, ``ideal_fct_s[flow]`` (alone on an idle path, s),
    ``edges_bytes``: the slowdown buckets' upper edges (the scaled sizes at equal steps of the CDF), the seed
    drawn with and the hosts' mean inter-arrival, s."""

    cdf: FlowSizeCdf
    flows: tuple[OpenFlow, ...]
    ideal_fct_s: tuple[float, ...]
    edges_bytes: tuple[int, ...]
    seed: int
    mean_interarrival_s: float

    @property
    def ideal_span_s(self) -> float:
        """Ideal time from the traffic's start to the last flow's end (each flow alone), s."""
        return max(f.start_s + t for f, t in zip(self.flows, self.ideal_fct_s))


def bucket_edges(cdf: FlowSizeCdf, buckets: int, size_scale: float) -> tuple[int, ...]:
    """The ``buckets`` upper edges (bytes, as drawn: scaled, rounded, >= 1) at percents 100/buckets, ...,
    100 of ``cdf``; equal neighbours merged (a scale that rounds them together)."""
    q = cdf.quantile_bytes(np.arange(1, buckets + 1) * 100 / buckets) * size_scale
    return tuple(sorted({int(v) for v in np.maximum(np.rint(q), 1)}))


def plan_open_loop(spec, layout) -> OpenLoopPlan:
    """The plan of ``spec.workload.open_loop`` on ``layout`` (every host, rank order). Raises ScenarioError
    naming ``workload.open_loop.cdf`` for a bad CDF file (testbed.workloads.open_loop.cdf.read_cdf) and
    ScenarioError naming the fabric for fewer than 2 hosts."""
    from testbed.spec.yaml_loader import ScenarioError
    o = spec.workload.open_loop
    cdf = read_cdf(o.cdf)
    n = len(layout.hosts)
    if n < 2:
        raise ScenarioError(f"workload.open_loop: the fabric has {n} host; open-loop flows need 2 or more")
    link_bps = spec.fabric.host_link_bps
    seed = spec.seed if o.seed is None else o.seed
    flows = open_loop_flows(cdf, n, o.load, link_bps, o.size_scale, seed, o.lanes, o.duration_s, o.flows)
    if not flows:
        raise ScenarioError(f"workload.open_loop.duration_s = {o.duration_s}: no flow arrives in it (mean gap "
                            f"{mean_interarrival_s(cdf.mean_bytes * o.size_scale, o.load, link_bps):.3f} s per host)"
                            ": give a longer duration_s or flows")
    paths = idle_paths(layout, spec.fabric.link_delay_us)
    payload = spec.transport.payload_bytes
    ideal = tuple(standalone_fct_s(f.size_bytes, paths[(f.src, f.dst)], payload) for f in flows)
    return OpenLoopPlan(cdf, tuple(flows), ideal, bucket_edges(cdf, o.buckets, o.size_scale), seed,
                        mean_interarrival_s(cdf.mean_bytes * o.size_scale, o.load, link_bps))
