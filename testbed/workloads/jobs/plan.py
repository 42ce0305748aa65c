"""The op plan of a ``jobs`` scenario: each job's workload on its placed hosts, each job on its own streams.

Each job is planned by its kind's Workload (``job_placed``, ``job_plan``; testbed.workloads.job_workload), with
no second dispatch here. A size-sweep job's ops are those of its ``workload`` (testbed.workloads.sweep.job) over
its ranks (the global ranks of its hosts, in placement order), repeated for ``iterations`` passes (warm-ups in
the first pass only), on one stream. A SimAI job's ops are its file's whole-job replay on its hosts (testbed.workloads.simai.job),
one stream per communicator. A pattern job (``workload.pattern``, testbed.workloads.pattern.job) adds no op: its
flows (:attr:`PlacedJob.flows`) run as passes on its one stream. Every op is tagged ``job`` = its job's
name; streams are numbered job by job (a job's first stream follows the previous job's last), so ops of
one job's stream run in order (FIFO) and different jobs' ops and flows never share a stream
(testbed.emulation.agents.AgentGroup.submit, submit_flows). Op ids are the ops' indices in the returned
plan: job by job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from testbed.spec.jobs import job_traffic_class, run_tenant_map
from testbed.spec.placement import place_jobs, reserved_hosts
from testbed.workloads.plan import PlannedOp, WorkloadPlan
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


def placed_jobs(spec) -> tuple[PlacedJob, ...]:
    """Every job of ``spec.jobs`` placed (testbed.spec.placement.place_jobs) with its passes (its kind's
    ``Workload.job_placed``: testbed.workloads.job_workload)."""
    from testbed.workloads import job_workload

    layout = spec.fabric.layout_preview()
    rank_of = {h.name: h.rank for h in layout.hosts}
    hosts = place_jobs(layout, spec.jobs, spec.seed, reserved_hosts(spec))
    return tuple(job_workload(spec, k).job_placed(k, PlacedJob(
        j.name, j.tenant, hosts[j.name], tuple(rank_of[h] for h in hosts[j.name]), j.placement_policy, j.start_s,
        job_traffic_class(spec, j), k, j.iterations or 1, j.duration_s)) for k, j in enumerate(spec.jobs))


def jobs_plan(spec) -> tuple[WorkloadPlan, tuple[PlacedJob, ...]]:
    """The plan (ops job by job, each tagged with its job and stream; notes naming each job's hosts) and
    the placed jobs (their streams set; a SimAI job's replay), each job planned by its kind
    (``Workload.job_plan``). Raises ValueError as testbed.spec.placement.place_jobs does (the spec checked
    it), ScenarioError naming ``jobs.N.`` when a SimAI job's file does not fit its ranks
    (testbed.workloads.simai.job)."""
    from testbed.workloads import job_workload

    jobs: list[PlacedJob] = []
    ops: list[PlannedOp] = []
    notes: list[str] = []
    stream = 0
    for k, j in enumerate(placed_jobs(spec)):
        j, job_ops, job_notes = job_workload(spec, k).job_plan(k, j, stream, len(ops))
        ops.extend(job_ops)
        notes.extend(job_notes)
        jobs.append(j)
        stream += j.n_streams
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


def pinned_spec(spec, names: list[str], suffix: str):
    """``spec`` with only the jobs ``names``, each pinned to the hosts it has in the full scenario (a hosts
    list); alone (one job) it starts at 0 s, in a pair the pair's start_s are kept. With tenants, the full
    run's tenant map (declared hosts plus every job's placed hosts, testbed.spec.jobs.run_tenant_map) is
    written into ``tenants``, so the same hosts are isolated the same way without the other jobs."""
    hosts = {j.name: j.hosts for j in placed_jobs(spec)}
    update = {}
    tmap = run_tenant_map(spec)
    if tmap is not None:
        update["tenants"] = {t: spec.tenants[t].model_copy(update={"hosts": tuple(h)})
                             for t, h in tmap.tenants.items() if h}
    jobs = []
    for j in spec.jobs:
        if j.name in names:
            jobs.append(j.model_copy(update={"hosts": tuple(hosts[j.name]), "ranks": None, "placement": None,
                                             "start_s": 0.0 if len(names) == 1 else j.start_s}))
    return spec.model_copy(update={"jobs": tuple(jobs), "name": f"{spec.name}-{suffix}"[:64], **update})
