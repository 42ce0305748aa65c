"""The op plan of a ``jobs`` scenario: each job's size sweep on its placed hosts, one stream per job.

Each job's ops are those of its ``workload`` (testbed.plan.sweep_ops) over its ranks (the global ranks
of its hosts, in placement order), repeated for ``iterations`` passes (warm-ups in the first pass only),
tagged ``job`` = its name and ``stream`` = its index in the list: ops of one job run in order (FIFO on
its stream), the jobs concurrently (testbed.emulation.agents.AgentGroup.submit). Op ids are the ops'
indices in the returned plan: job by job.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from testbed.jobs.placement import place_jobs
from testbed.plan import PlannedOp, WorkloadPlan, list_places, sweep_ops
from testbed.spec import estimate
from testbed.spec.jobs import job_traffic_class
from traffic.transport.qp import class_tos


@dataclass(frozen=True)
class PlacedJob:
    """One job where it runs: ``hosts`` (names) and ``ranks`` (their global ranks) in the job's rank order;
    ``stream``: its stream (= index in the jobs list); ``traffic_class``: lossless or lossy (its own, else its
    tenant's: testbed.spec.jobs.job_traffic_class); ``passes``: planned passes over its workload;
    ``duration_s``: stop starting passes after this many seconds (None: run every pass)."""

    name: str
    tenant: str
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    placement: str
    start_s: float
    traffic_class: str
    stream: int
    passes: int
    duration_s: Optional[float]

    def as_dict(self) -> dict:
        return {"name": self.name, "tenant": self.tenant, "hosts": list(self.hosts), "ranks": list(self.ranks),
                "placement": self.placement, "start_s": self.start_s, "traffic_class": self.traffic_class,
                "stream": self.stream, "passes": self.passes, "duration_s": self.duration_s}


def pass_estimate_s(spec, ops) -> float:
    """Seconds one pass of ``ops`` takes on an idle fabric (testbed.spec.estimate.estimate_run_s, no set-up)."""
    f = spec.fabric
    return estimate.estimate_run_s(ops, f.n_hosts, f.host_link_bps, f.fabric_link_bps, f.ranks_per_switch,
                                   spec.transport.payload_bytes, 0.0)


def placed_jobs(spec) -> tuple[PlacedJob, ...]:
    """Every job of ``spec.jobs`` placed (testbed.jobs.placement.place_jobs) with its passes."""
    layout = spec.fabric.layout_preview()
    rank_of = {h.name: h.rank for h in layout.hosts}
    hosts = place_jobs(layout, spec.jobs, spec.seed)
    out = []
    for k, j in enumerate(spec.jobs):
        ranks = tuple(rank_of[h] for h in hosts[j.name])
        one, _ = sweep_ops(j.workload, ranks, warmup=False)
        out.append(PlacedJob(j.name, j.tenant, hosts[j.name], ranks, j.placement_policy, j.start_s,
                             job_traffic_class(spec, j), k, j.passes(pass_estimate_s(spec, one)), j.duration_s))
    return tuple(out)


def jobs_plan(spec) -> tuple[WorkloadPlan, tuple[PlacedJob, ...]]:
    """The plan (ops job by job, each tagged with its job and stream; notes naming each job's hosts) and
    the placed jobs. Raises ValueError as testbed.jobs.placement.place_jobs does (the spec checked it)."""
    jobs = placed_jobs(spec)
    ops: list[PlannedOp] = []
    notes = []
    for j, js in zip(jobs, spec.jobs):
        cut_all = []
        for p in range(j.passes):
            pass_ops, cut = sweep_ops(js.workload, j.ranks, warmup=p == 0)
            cut_all = cut_all or cut
            ops.extend(replace(op, job=j.name, stream=j.stream, group=j.name,
                               iteration=op.iteration + (0 if op.warmup else p * js.workload.iterations))
                       for op in pass_ops)
        notes.append(f"job {j.name} (tenant {j.tenant}): {len(j.hosts)} ranks on {', '.join(j.hosts)} "
                     f"({j.placement}), starts at {j.start_s:g} s, {j.passes} pass(es), traffic class "
                     f"{j.traffic_class} (DSCP {class_tos(j.traffic_class) >> 2})"
                     + (f", stops starting passes after {j.duration_s:g} s" if j.duration_s else ""))
        if cut_all:
            notes.append(f"jobs.{j.stream}.workload.max_bytes_per_size = {js.workload.max_bytes_per_size} B cuts "
                         f"the larger sizes' iterations (size: iterations run): {list_places(cut_all)}")
    lossy = [j.name for j in jobs if j.traffic_class == "lossy"]
    if lossy and spec.fabric.queue_backend != "htb_classes":
        notes.append(f"fabric.queue_backend {spec.fabric.queue_backend} has one queue per port: the lossy class of "
                     f"job(s) {', '.join(lossy)} is only a DSCP marking (htb_classes queues it apart)")
    return WorkloadPlan(tuple(ops), tuple(notes)), jobs


def stream_tos(jobs: tuple[PlacedJob, ...], streams: int) -> list[int]:
    """The TOS byte of each of ``streams`` streams' data packets (traffic.protocol.AgentConfig.stream_tos): the
    class of the job on that stream (traffic.transport.qp.class_tos), lossless for a stream no job holds."""
    by_stream = {j.stream: class_tos(j.traffic_class) for j in jobs}
    return [by_stream.get(s, class_tos("lossless")) for s in range(streams)]


def tenant_hosts(spec) -> dict[str, tuple[str, ...]]:
    """Tenant -> the hosts its jobs hold (placement order, jobs in list order): what a tenant map (which
    hosts may reach which) takes from a jobs scenario. {} for a single-workload scenario."""
    out: dict[str, tuple[str, ...]] = {}
    for j in placed_jobs(spec) if spec.jobs else ():
        out[j.tenant] = out.get(j.tenant, ()) + j.hosts
    return out


def run_tenant_map(spec):
    """The run's testbed.spec.tenants.TenantMap: the scenario's ``tenants`` plus every job's placed hosts in
    its job's tenant (testbed.spec.tenants.tenant_map's ``extra``); None without a ``tenants`` section.
    Raises ScenarioError as tenant_map does."""
    if not spec.tenants:
        return None
    from testbed.spec.tenants import tenant_map

    if not spec.jobs:
        return tenant_map(spec)
    return tenant_map(spec, extra={h: t for t, hosts in tenant_hosts(spec).items() for h in hosts})
