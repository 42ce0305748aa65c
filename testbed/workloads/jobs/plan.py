"""The op plan of a ``jobs`` scenario: each job's workload on its placed hosts, each job on its own streams.

A size-sweep job's ops are those of its ``workload`` (testbed.workloads.plan.sweep_ops) over its ranks (the global
ranks of its hosts, in placement order), repeated for ``iterations`` passes (warm-ups in the first pass
only), on one stream. A SimAI job's ops are its file's whole-job replay on its hosts (testbed.workloads.simai.job),
one stream per communicator. A pattern job (``workload.pattern``, testbed.workloads.pattern.job) adds no op: its
flows (:attr:`PlacedJob.flows`) run as passes on its one stream. Every op is tagged ``job`` = its job's
name; streams are numbered job by job (a job's first stream follows the previous job's last), so ops of
one job's stream run in order (FIFO) and different jobs' ops and flows never share a stream
(testbed.emulation.agents.AgentGroup.submit, submit_flows). Op ids are the ops' indices in the returned
plan: job by job.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from testbed.spec import estimate
from testbed.spec.jobs import job_flows, job_traffic_class
from testbed.spec.placement import place_jobs, reserved_hosts
from testbed.workloads.pattern.job import pass_s
from testbed.workloads.plan import PlannedOp, WorkloadPlan, list_places, sweep_ops
from traffic.transport.qp import class_tos


@dataclass(frozen=True)
class PlacedJob:
    """One job where it runs: ``hosts`` (names) and ``ranks`` (their global ranks) in the job's rank order;
    ``stream``: its first stream and ``n_streams`` how many (set by :func:`jobs_plan`; :func:`placed_jobs`
    gives the job's index and 1); ``passes``: planned passes over its workload (a SimAI job's
    with ``duration_s``: set by :func:`jobs_plan`); ``duration_s``: stop starting passes after this many
    seconds (None: run every pass); ``workload``: ``sizes``, ``simai`` or ``pattern``; ``replay``: a SimAI
    job's timeline (testbed.workloads.simai.plan.ReplayPlan, set by :func:`jobs_plan`) whose fabric ops start at op
    ``first_op``; ``flows``: a pattern job's flows (one stream: ``n_streams`` 1, no op); ``traffic_class``:
    lossless or lossy (its own, else its tenant's: testbed.spec.jobs.job_traffic_class), on all its streams."""

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
    #: ``sizes`` (a size sweep), ``simai`` (a SimAI/AICB file) or ``pattern`` (a traffic pattern)
    workload: str = "sizes"
    n_streams: int = 1
    replay: Optional[object] = None
    first_op: int = 0
    #: a pattern job's flows (traffic.patterns.Flow, the run's ranks); () for the other workloads
    flows: tuple = ()

    def as_dict(self) -> dict:
        return {"name": self.name, "tenant": self.tenant, "hosts": list(self.hosts), "ranks": list(self.ranks),
                "placement": self.placement, "start_s": self.start_s, "traffic_class": self.traffic_class,
                "workload": self.workload, "stream": self.stream,
                "streams": list(range(self.stream, self.stream + self.n_streams)), "passes": self.passes,
                "duration_s": self.duration_s}


def pass_estimate_s(spec, ops) -> float:
    """Seconds one pass of ``ops`` takes on an idle fabric (testbed.spec.estimate.estimate_run_s, no set-up)."""
    f = spec.fabric
    return estimate.estimate_run_s(ops, f.n_hosts, f.host_link_bps, f.fabric_link_bps, f.ranks_per_switch,
                                   spec.transport.payload_bytes, 0.0)


def placed_jobs(spec) -> tuple[PlacedJob, ...]:
    """Every job of ``spec.jobs`` placed (testbed.spec.placement.place_jobs) with its passes."""
    layout = spec.fabric.layout_preview()
    rank_of = {h.name: h.rank for h in layout.hosts}
    hosts = place_jobs(layout, spec.jobs, spec.seed, reserved_hosts(spec))
    out = []
    for k, j in enumerate(spec.jobs):
        ranks = tuple(rank_of[h] for h in hosts[j.name])
        if j.workload.simai is not None:  # its passes with duration_s need the file: jobs_plan
            out.append(PlacedJob(j.name, j.tenant, hosts[j.name], ranks, j.placement_policy, j.start_s,
                                 job_traffic_class(spec, j), k, j.iterations or 1, j.duration_s, "simai"))
            continue
        if j.workload.pattern is not None:
            flows = tuple(job_flows(spec, k, hosts[j.name], layout))
            out.append(PlacedJob(j.name, j.tenant, hosts[j.name], ranks, j.placement_policy, j.start_s,
                                 job_traffic_class(spec, j), k, j.passes(pass_s(spec, list(flows))), j.duration_s,
                                 "pattern", flows=flows))
            continue
        one, _ = sweep_ops(j.workload, ranks, warmup=False)
        out.append(PlacedJob(j.name, j.tenant, hosts[j.name], ranks, j.placement_policy, j.start_s,
                             job_traffic_class(spec, j), k, j.passes(pass_estimate_s(spec, one)), j.duration_s))
    return tuple(out)


def _simai_job(spec, index: int, j: PlacedJob, first_stream: int, first_op: int):
    """(the SimAI job placed with its streams, passes and replay; its JobReplay), testbed.workloads.simai.job."""
    from testbed.workloads.simai.job import job_replay

    js = spec.jobs[index]
    passes = j.passes
    if js.duration_s is not None:  # passes of one pass's estimate (collectives on an idle fabric + compute)
        one = job_replay(spec, index, j.ranks, first_stream, 1)
        passes = js.passes(pass_estimate_s(spec, one.ops) + one.replay.timeline_extra_s)
    jr = job_replay(spec, index, j.ranks, first_stream, passes)
    return replace(j, stream=first_stream, n_streams=jr.n_streams, passes=passes, replay=jr.replay,
                   first_op=first_op), jr


def jobs_plan(spec) -> tuple[WorkloadPlan, tuple[PlacedJob, ...]]:
    """The plan (ops job by job, each tagged with its job and stream; notes naming each job's hosts) and
    the placed jobs (their streams set; a SimAI job's replay). Raises ValueError as
    testbed.spec.placement.place_jobs does (the spec checked it), ScenarioError naming ``jobs.N.`` when a
    SimAI job's file does not fit its ranks (testbed.workloads.simai.job)."""
    placed = placed_jobs(spec)
    jobs: list[PlacedJob] = []
    ops: list[PlannedOp] = []
    notes = []
    stream = 0
    for k, (j, js) in enumerate(zip(placed, spec.jobs)):
        if js.workload.simai is not None:
            j, jr = _simai_job(spec, k, j, stream, len(ops))
            ops.extend(jr.ops)
            notes.append(f"job {j.name} (tenant {j.tenant}): SimAI {js.workload.simai.path}, {len(j.hosts)} ranks "
                         f"on {', '.join(j.hosts)} ({j.placement}), starts at {j.start_s:g} s, "
                         f"{len(j.replay.modes)} iteration(s) on streams {j.stream}..{j.stream + j.n_streams - 1}"
                         + (f", starts no iteration after {j.duration_s:g} s" if j.duration_s else ""))
            notes.extend(jr.notes)
            jobs.append(j)
            stream += j.n_streams
            continue
        j = replace(j, stream=stream, first_op=len(ops))
        jobs.append(j)
        stream += j.n_streams
        if j.flows:
            p = js.workload.pattern
            notes.append(f"job {j.name} (tenant {j.tenant}): pattern {p.kind}, {len(j.flows)} flows of "
                         f"{sum(f.size_bytes for f in j.flows)} B in all on {', '.join(j.hosts)} ({j.placement}), "
                         f"starts at {j.start_s:g} s, {j.passes} pass(es) on stream {j.stream}"
                         + (f", stops starting passes after {j.duration_s:g} s" if j.duration_s else ""))
            continue
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
            notes.append(f"jobs.{k}.workload.max_bytes_per_size = {js.workload.max_bytes_per_size} B cuts "
                         f"the larger sizes' iterations (size: iterations run): {list_places(cut_all)}")
    lossy = [j.name for j in jobs if j.traffic_class == "lossy"]
    if lossy and spec.fabric.queue_backend != "htb_classes":
        notes.append(f"fabric.queue_backend {spec.fabric.queue_backend} has one queue per port: the lossy class of "
                     f"job(s) {', '.join(lossy)} is only a DSCP marking (htb_classes queues it apart)")
    return WorkloadPlan(tuple(ops), tuple(notes)), tuple(jobs)


def stream_tos(jobs: tuple[PlacedJob, ...], streams: int) -> list[int]:
    """The TOS byte of each of ``streams`` streams' data packets (traffic.protocol.AgentConfig.stream_tos): the
    class of the job holding that stream (each of a SimAI job's ``n_streams``; traffic.transport.qp.class_tos),
    lossless for a stream no job holds."""
    by_stream = {s: class_tos(j.traffic_class) for j in jobs for s in range(j.stream, j.stream + j.n_streams)}
    return [by_stream.get(s, class_tos("lossless")) for s in range(streams)]
