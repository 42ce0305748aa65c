"""The ``jobs`` section: several training jobs sharing one fabric, each on its own hosts.

A scenario holds either one ``workload`` (one job over the first hosts, as before) or a ``jobs`` list,
never both. Each job::

    jobs:
      - name: a                    # [A-Za-z0-9_-], unique
        tenant: red                # who owns it (carried into jobs.csv / tenants.csv; tenants map it)
        ranks: 4                   # with placement, or an explicit  hosts: [h1, h2, h3, h4]
        placement: packed          # packed (leaf by leaf) | spread (round robin over leaves) | random (seeded)
        workload: {sizes: {min_bytes: 256KiB, max_bytes: 256KiB}, iterations: 4, warmup_iterations: 1}
        start_s: 0                 # seconds after the traffic starts
        traffic_class: lossy       # lossless (DSCP 26) | lossy (DSCP 0); default: the tenant's, else lossless
        iterations: 1              # passes over the job's workload (or duration_s: repeat until then)

Hosts are never shared between jobs: each job's agents run its collectives on its own hosts, as a
scheduler hands a job whole servers. Placement runs in list order and skips hosts earlier jobs hold
(testbed.spec.placement). The job's ``workload`` is today's workload section restricted to a size
sweep (``workload.sizes``), a SimAI/AICB file (``workload.simai``: its whole-job replay on the job's
hosts, testbed.workloads.simai.job; the file's all_gpus must be the job's ranks or a multiple of them, checked
when the scenario is loaded) or a traffic pattern (``workload.pattern``, testbed.workloads.pattern.job: its hosts
are the job's, pattern rank i = the job's i-th host; ``trials`` and the sweep's keys are refused there);
``workload.chakra`` is refused, and so is ``workload.ranks`` (the job's ``ranks`` or ``hosts`` say it).

A job's traffic class (:func:`job_traffic_class`: its own ``traffic_class``, else its tenant's
``tenants.<name>.traffic_class``, else lossless) sets the DSCP of its RoCE data packets, on its own streams'
queue pairs (traffic.transport.qp.CLASS_TOS): lossless DSCP 26, lossy DSCP 0 (CS0, best effort), both ECT(0);
ACKs, NAKs and CNPs stay in the control class (DSCP 48). With ``fabric.queue_backend: htb_classes`` the
switches queue the two in different classes (ECN marking and PFC act on the lossless class only; a lossy QP
also ignores PFC frames at its NIC); with a single FIFO queue backend the class is only a DSCP marking.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, model_validator

from testbed.spec.hosts import host_infos, short
from testbed.spec.placement import place_jobs, reserved_hosts
from testbed.spec.tenants import tenant_map
from testbed.spec.units import Count, SpecModel
from testbed.spec.workload import WorkloadSpec
from testbed.spec.yaml_loader import ScenarioError
from traffic.patterns import Flow, HostInfo, PatternError, build_flows

#: placement policies of a job given by ``ranks`` (testbed.spec.placement)
PLACEMENTS = ("packed", "spread", "random")
#: the most passes a job plans (``iterations``, or what ``duration_s`` needs)
MAX_PASSES = 1000
#: traffic classes a job may name (testbed.spec.congestion.CLASS_NAMES without the control class)
JOB_TRAFFIC_CLASSES = ("lossless", "lossy")


class JobSpec(SpecModel):
    """One job of the ``jobs`` list: its own hosts, workload, start and tenant (docs/jobs.md)."""

    #: unique in the list; the job's column in jobs.csv and its ``group`` in ops.csv
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    #: who owns it (jobs.csv, tenants.csv; with a ``tenants`` section it must be declared there)
    tenant: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    #: its hosts in rank order (or ``ranks`` with ``placement``); never another job's
    hosts: Optional[tuple[str, ...]] = None
    #: how many hosts, placed by ``placement``
    ranks: Optional[Count] = Field(None, ge=2)
    #: packed: leaf by leaf; spread: round robin over the leaves; random: seeded with the run's seed (default packed)
    placement: Optional[Literal["packed", "spread", "random"]] = None
    #: the workload section's shape: a size sweep (``sizes``), a SimAI/AICB file (``simai``) or a traffic pattern
    #: (``pattern``, on the job's hosts)
    workload: WorkloadSpec
    #: seconds after the traffic starts
    start_s: float = Field(0.0, ge=0, le=3600, allow_inf_nan=False)
    #: DSCP of the job's RoCE data packets: lossless 26, lossy 0 (None: its tenant's class, else lossless)
    traffic_class: Optional[Literal["lossless", "lossy"]] = None
    #: passes over the workload (default 1; warm-ups in the first only)
    iterations: Optional[Count] = Field(None, ge=1, le=MAX_PASSES)
    #: repeat passes, starting none after this many seconds since the job's start
    duration_s: Optional[float] = Field(None, gt=0, le=3600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _shape(self) -> "JobSpec":
        if (self.hosts is None) == (self.ranks is None):
            raise ValueError(f"job {self.name!r}: give exactly one of hosts (a list of host names) or ranks "
                             f"(a number, with placement: {' | '.join(PLACEMENTS)})")
        if self.hosts is not None:
            if self.placement is not None:
                raise ValueError(f"job {self.name!r}: placement applies to ranks; hosts lists the hosts itself")
            if len(self.hosts) < 2:
                raise ValueError(f"job {self.name!r}: hosts lists {len(self.hosts)} host; a collective needs >= 2")
            if len(set(self.hosts)) != len(self.hosts):
                dup = sorted({h for h in self.hosts if self.hosts.count(h) > 1})
                raise ValueError(f"job {self.name!r}: hosts lists {', '.join(dup)} twice")
        w = self.workload
        if w.sizes is None and w.simai is None and w.pattern is None:
            other = next((k for k in ("chakra",) if getattr(w, k, None) is not None), "?")
            raise ValueError(f"job {self.name!r}: workload.{other} is not supported in a job yet; allowed: "
                             f"workload.sizes (a collective size sweep), workload.simai (a SimAI/AICB file) or "
                             f"workload.pattern (a traffic pattern)")
        if w.ranks is not None:
            raise ValueError(f"job {self.name!r}: workload.ranks does not apply in a job: the job's ranks or "
                             f"hosts say where it runs")
        if self.iterations is not None and self.duration_s is not None:
            raise ValueError(f"job {self.name!r}: give iterations or duration_s, not both")
        return self

    @property
    def n_ranks(self) -> int:
        """Ranks of the job: len(hosts) or ranks."""
        return len(self.hosts) if self.hosts is not None else int(self.ranks)

    @property
    def placement_policy(self) -> str:
        """``explicit`` for a hosts list, else the placement (default packed)."""
        return "explicit" if self.hosts is not None else (self.placement or "packed")

    def passes(self, pass_s: float) -> int:
        """Passes over the workload to plan: ``iterations`` (default 1), or with ``duration_s`` enough passes
        of ``pass_s`` seconds (the estimate) to fill it, ceil(duration_s / pass_s), at most 1000; the run stops
        starting passes once duration_s has passed since the job's start."""
        if self.duration_s is None:
            return self.iterations or 1
        return max(1, min(MAX_PASSES, math.ceil(self.duration_s / max(pass_s, 1e-6))))


def jobs_channels(jobs) -> int:
    """Queue pairs per peer and stream the agents of a jobs run start with: the collective jobs'
    ``workload.channels`` (equal in every one: :func:`check_jobs`); with pattern jobs only, the most queue pairs
    a flow of theirs uses (``workload.pattern.qps``). A pattern job's flows must fit it."""
    sweeps = [j.workload.channels for j in jobs if j.workload.pattern is None]
    return sweeps[0] if sweeps else max(j.workload.pattern.max_qps for j in jobs)


def job_traffic_class(spec, job: JobSpec) -> str:
    """The class of ``job`` in scenario ``spec``: its ``traffic_class``, else its tenant's
    (``tenants.<tenant>.traffic_class``), else ``lossless``; one of :data:`JOB_TRAFFIC_CLASSES`."""
    if job.traffic_class is not None:
        return job.traffic_class
    tenant = spec.tenants.get(job.tenant)
    return (tenant.traffic_class if tenant is not None else None) or "lossless"


def check_workload_or_jobs(spec) -> None:
    """A scenario has exactly one of ``workload`` and ``jobs``: ValueError saying which is wrong."""
    if (spec.workload is None) == (not spec.jobs):
        raise ValueError("a scenario needs exactly one of workload (one job on the first hosts) or jobs (a "
                         "list of jobs sharing the fabric)" + (": both are given" if spec.jobs else ""))


def check_tenant_classes(spec) -> None:
    """A tenant's ``traffic_class`` is its jobs' default: ValueError naming ``tenants.<name>.traffic_class``
    when the scenario has no jobs list."""
    if spec.jobs:
        return
    for name, t in spec.tenants.items():
        if t.traffic_class is not None:
            raise ValueError(f"tenants.{name}.traffic_class: a tenant's traffic class is the default of its "
                             f"jobs, and this scenario has no jobs list (one workload, always lossless); give "
                             f"the jobs under `jobs:` or leave traffic_class out")


def cluster_kinds(spec) -> dict[str, bool]:
    """The kinds of workload a run over several servers does not offer yet (testbed.spec.cluster), each
    whether ``spec`` has it: ``jobs`` (a jobs list), ``workload.perftest``."""
    return {"jobs": bool(spec.jobs),
            "workload.perftest": spec.workload is not None and spec.workload.perftest is not None}


def resolved_jobs(spec, scenario_path):
    """``spec`` with each job's files resolved against the folder of the scenario file ``scenario_path``
    (testbed.spec.workload.WorkloadSpec.resolved); ``spec`` itself without jobs."""
    if not spec.jobs:
        return spec
    return spec.model_copy(update={"jobs": tuple(j.model_copy(update={"workload": j.workload.resolved(
        scenario_path, f"jobs.{i}.workload")}) for i, j in enumerate(spec.jobs))})


def qp_channels(spec) -> int:
    """Queue pairs per peer and stream the agents of a run of ``spec`` start with: :func:`jobs_channels` of a
    jobs list, else the workload's (testbed.spec.workload.WorkloadSpec.qp_channels)."""
    return jobs_channels(spec.jobs) if spec.jobs else spec.workload.qp_channels


def check_jobs(spec) -> None:
    """Names unique; explicit hosts exist on the fabric and no host in two jobs; the jobs fit the fabric's
    hosts; with a ``tenants`` section each job's tenant is declared there and its placed hosts may join
    it. ValueError naming ``jobs.N.KEY`` and what is allowed. Nothing to check without a jobs list."""
    if not spec.jobs:
        return
    jobs = spec.jobs
    seen: dict[str, int] = {}
    first = next((k for k, j in enumerate(jobs) if j.workload.pattern is None), 0)  # the first collective job
    for i, j in enumerate(jobs):
        if j.name in seen:
            raise ValueError(f"jobs.{i}.name: {j.name!r} is also jobs.{seen[j.name]}'s name; names must be unique")
        seen[j.name] = i
        if j.workload.pattern is None and j.workload.channels != jobs[first].workload.channels:
            raise ValueError(f"jobs.{i}.workload.channels: {j.workload.channels}, but jobs.{first} has "
                             f"{jobs[first].workload.channels}; every job of a run uses the same channels")
    for i, j in enumerate(jobs if spec.tenants else ()):
        if j.tenant not in spec.tenants:
            raise ValueError(f"jobs.{i}.tenant: {j.tenant!r} is not declared under tenants; allowed: "
                             f"{', '.join(spec.tenants)}")
    placed = place_jobs(spec.fabric.layout_preview(), jobs, spec.seed, reserved_hosts(spec))  # ValueError: job, host
    check_pattern_jobs(spec, placed)  # ValueError naming jobs.N.workload.<key>
    if spec.tenants:  # each job's hosts join its tenant (testbed.spec.tenants.tenant_map's extra)
        try:
            run_tenant_map(spec)
        except ScenarioError as e:
            raise ValueError(f"jobs: the jobs' placed hosts do not fit the tenants: {e}") from None


#: workload keys of a size sweep that a pattern job leaves out (its passes are the job's ``iterations``)
SWEEP_KEYS = ("iterations", "warmup_iterations", "max_bytes_per_size")


def job_hosts(layout, hosts) -> list[HostInfo]:
    """The job's hosts (names in its rank order) as the pattern sees them: rank i = the job's i-th host."""
    info = {h.name: h for h in host_infos(layout)}
    return [HostInfo(h, i, info[h].switch) for i, h in enumerate(hosts)]


def job_flows(spec, index: int, hosts, layout) -> list[Flow]:
    """Job ``index``'s pattern on its ``hosts`` (names, rank order), src/dst as the run's ranks.

    Raises ValueError naming ``jobs.N.workload.pattern.<key>`` when the pattern does not fit the job's hosts."""
    mine = job_hosts(layout, hosts)
    try:
        flows = build_flows(spec.jobs[index].workload.pattern, mine, spec.seed)
    except PatternError as e:
        raise ValueError(f"jobs.{index}.{e}; in a job the pattern's hosts are the job's: "
                         f"{', '.join(hosts)} (pattern rank i = the job's i-th host)") from None
    rank_of = {short(layout, h.name): h.rank for h in layout.hosts}
    glob = [rank_of[h.name] for h in mine]
    return [Flow(f.flow, glob[f.src], glob[f.dst], f.size_bytes, f.start_s, f.qps) for f in flows]


def check_pattern_jobs(spec, placed: dict[str, tuple[str, ...]]) -> None:
    """Every pattern job fits its placed hosts (``placed``: job -> hosts, testbed.spec.placement.place_jobs),
    sets no size-sweep key and no ``trials``, and its flows' queue pairs fit the run's channels. ValueError
    naming ``jobs.N.workload.<key>`` and what is allowed."""
    layout = spec.fabric.layout_preview()
    for i, j in enumerate(spec.jobs):
        w = j.workload
        if w.pattern is None:
            continue
        stray = [k for k in SWEEP_KEYS if k in w.model_fields_set]
        if stray:
            raise ValueError(f"jobs.{i}.workload.{stray[0]} applies to a size sweep; a pattern job repeats its "
                             f"flows with the job's iterations or duration_s (jobs.{i}.iterations): leave it out")
        if "trials" in w.pattern.model_fields_set and w.pattern.trials != 1:
            raise ValueError(f"jobs.{i}.workload.pattern.trials = {w.pattern.trials}: trials restart the agents "
                             f"with a new entropy seed, and a job shares them with the other jobs; allowed 1 (repeat "
                             f"the flows on the same QPs with jobs.{i}.iterations or duration_s)")
        channels = jobs_channels(spec.jobs)
        if w.pattern.max_qps > channels:
            raise ValueError(f"jobs.{i}.workload.pattern.qps = {w.pattern.max_qps}: every stream of a jobs run has "
                             f"the collective jobs' workload.channels = {channels} queue pairs per peer; allowed "
                             f"qps <= {channels} (or raise workload.channels in every collective job)")
        job_flows(spec, i, placed[j.name], layout)


def tenant_hosts(spec) -> dict[str, tuple[str, ...]]:
    """Tenant -> the hosts its jobs hold (placement order, jobs in list order; testbed.spec.placement): what
    a tenant map (which hosts may reach which) takes from a jobs scenario. {} for a single-workload scenario."""
    if not spec.jobs:
        return {}
    hosts = place_jobs(spec.fabric.layout_preview(), spec.jobs, spec.seed, reserved_hosts(spec))
    out: dict[str, tuple[str, ...]] = {}
    for j in spec.jobs:
        out[j.tenant] = out.get(j.tenant, ()) + tuple(hosts[j.name])
    return out


def run_tenant_map(spec):
    """The run's testbed.spec.tenants.TenantMap: the scenario's ``tenants`` plus every job's placed hosts in
    its job's tenant (testbed.spec.tenants.tenant_map's ``extra``); None without a ``tenants`` section.
    Raises ScenarioError as tenant_map does."""
    if not spec.tenants:
        return None
    return tenant_map(spec, extra={h: t for t, hosts in tenant_hosts(spec).items() for h in hosts})
