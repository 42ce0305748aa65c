"""A SimAI/AICB workload file as one job of a ``jobs`` list: the file's whole-job replay on the job's hosts.

The job's plan is the single-workload replay's (testbed.workloads.simai.plan.simai_plan) planned on the job's
``n`` hosts, then moved onto the fabric: rank r of the file's host groups is the job's r-th placed host
(its global rank, testbed.workloads.jobs.plan.PlacedJob.ranks), and the replay's fabric streams (one per
communicator: TP, DP, EP, DP_EP of a stage, one direction of a stage boundary) are numbered from the
job's first stream, after every earlier job's streams, so no two jobs' collectives share a stream or its
queue pairs. The job's ``iterations`` multiplies ``workload.simai.iterations`` (passes over the file's
iterations); ``duration_s`` plans enough passes to fill it and the run starts no iteration after it.

World size: the file's ``all_gpus`` must equal the job's ranks (one GPU per host), or be a multiple of
them (each host a server of all_gpus / ranks GPUs sharing one NIC, as a single-workload replay allows);
otherwise ScenarioError naming ``jobs.N.ranks`` (or ``jobs.N.hosts``) and the file's world size.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from testbed.workloads.plan import PlannedOp, pass_estimate_s
from testbed.spec.scenario import ScenarioError


@dataclass(frozen=True)
class JobReplay:
    """One SimAI job's plan on the fabric: ``ops`` (PlannedOp with global ranks, offset streams and
    ``job``), ``notes``, ``replay`` (testbed.workloads.simai.plan.ReplayPlan with the job's iterations; its tasks'
    streams stay the job's own 0..k-1), ``n_streams``: the fabric streams it uses."""

    ops: tuple[PlannedOp, ...]
    notes: tuple[str, ...]
    replay: object
    n_streams: int


def job_spec(spec, index: int, passes: int = 1):
    """``spec`` with jobs.``index``'s workload as its ``workload`` (its simai iterations x ``passes``): what
    testbed.workloads.simai.plan plans and estimates. Not validated again (a copy of validated parts)."""
    w = spec.jobs[index].workload
    simai = w.simai.model_copy(update={"iterations": w.simai.iterations * passes})
    return spec.model_copy(update={"workload": w.model_copy(update={"simai": simai})})


def check_world_size(spec, index: int, n_ranks: int) -> None:
    """ScenarioError naming ``jobs.N.ranks`` (``jobs.N.hosts`` for a hosts list) and the file's world size
    when the file's all_gpus is neither ``n_ranks`` nor a multiple of it (module docstring)."""
    from testbed.workloads.simai.reader import load_file
    from traffic.workloads.placement import PlacementError, gpus_per_host

    job = spec.jobs[index]
    wl, _, _ = load_file(job_spec(spec, index))
    all_gpus = job.workload.simai.all_gpus or wl.header.all_gpus   # the file's unless the job's simai sets it
    if all_gpus is None:
        return
    try:
        gpus_per_host(all_gpus, n_ranks)
    except PlacementError:
        key = f"jobs.{index}.ranks" if job.hosts is None else f"jobs.{index}.hosts"
        raise ScenarioError(
            f"{key}: job {job.name!r} has {n_ranks} ranks but its workload.simai file {job.workload.simai.path} has "
            f"world size all_gpus: {all_gpus}; allowed: ranks = {all_gpus} (one GPU per host) or a divisor of "
            f"{all_gpus} (each host a server of all_gpus / ranks GPUs)") from None


def job_replay(spec, index: int, ranks: tuple[int, ...], first_stream: int, passes: int) -> JobReplay:
    """jobs.``index``'s SimAI replay on global ``ranks`` (the job's hosts in rank order), its fabric streams
    from ``first_stream`` on, ``passes`` x workload.simai.iterations iterations. Raises ScenarioError (world
    size: :func:`check_world_size`; the file: testbed.workloads.simai.plan.simai_plan, key prefixed ``jobs.N.``)."""
    from testbed.workloads.simai.plan import simai_plan

    job = spec.jobs[index]
    try:
        check_world_size(spec, index, len(ranks))
        plan = simai_plan(job_spec(spec, index, passes), n_hosts=len(ranks))
    except ScenarioError as e:
        msg = str(e)
        raise ScenarioError(f"jobs.{index}.{msg}" if msg.startswith("workload.") else f"jobs.{index}: {msg}") from None
    ops = tuple(replace(op, groups=tuple(tuple(ranks[r] for r in g) for g in op.groups),
                        stream=first_stream + op.stream, job=job.name) for op in plan.ops)
    n_streams = 1 + max(op.stream for op in plan.ops)
    notes = tuple(f"warning: job {job.name}: {n[9:]}" if n.startswith("warning: ") else f"job {job.name}: {n}"
                  for n in plan.notes)
    return JobReplay(ops, notes, plan.replay, n_streams)


def placed(spec, index: int, job):
    """``job`` (testbed.workloads.jobs.plan.PlacedJob) with the job's iterations as passes (with duration_s:
    set by :func:`plan`, which reads the file)."""
    return replace(job, passes=spec.jobs[index].iterations or 1, workload="simai")


def plan(spec, index: int, job, first_stream: int, first_op: int):
    """(the job placed with its streams from ``first_stream``, passes and replay whose fabric ops start at op
    ``first_op``; its ops; its notes). With duration_s its passes fill it: one pass's collectives on an idle
    fabric (testbed.workloads.plan.pass_estimate_s) plus its compute waits. Raises ScenarioError as
    :func:`job_replay` does."""
    js = spec.jobs[index]
    passes = job.passes
    if js.duration_s is not None:  # passes of one pass's estimate (collectives on an idle fabric + compute)
        one = job_replay(spec, index, job.ranks, first_stream, 1)
        passes = js.passes(pass_estimate_s(spec, one.ops) + one.replay.timeline_extra_s)
    jr = job_replay(spec, index, job.ranks, first_stream, passes)
    job = replace(job, stream=first_stream, n_streams=jr.n_streams, passes=passes, replay=jr.replay,
                  first_op=first_op)
    notes = [f"job {job.name} (tenant {job.tenant}): SimAI {js.workload.simai.path}, {len(job.hosts)} ranks "
             f"on {', '.join(job.hosts)} ({job.placement}), starts at {job.start_s:g} s, "
             f"{len(job.replay.modes)} iteration(s) on streams {job.stream}..{job.stream + job.n_streams - 1}"
             + (f", starts no iteration after {job.duration_s:g} s" if job.duration_s else ""), *jr.notes]
    return job, list(jr.ops), notes


def run(ctx, agents, rec, progress, job, record, stop, started: float, now) -> dict:
    """The job's replay (testbed.workloads.replay.run.run_replay on its ops, from op ``job.first_op``);
    ``record(k, op, recs, last)`` after each fabric op; no iteration starts once ``stop`` is set or, with
    duration_s, that many seconds passed since ``started`` (``now()``: monotonic seconds). Returns its
    ``replay`` block. Raises what the agents raise."""
    from testbed.workloads.replay.run import run_replay

    def keep_going() -> bool:
        return not stop.is_set() and (job.duration_s is None or now() - started < job.duration_s)

    return run_replay(ctx, agents, rec, progress, job.replay, op_base=job.first_op,
                      record=lambda k, op, recs: record(k, op, recs, False), keep_going=keep_going)


def replay_lines(ctx, index: int, entry: dict) -> list[str]:
    """The job's printed replay tables (testbed.results.replay_table.replay_text) under a line naming the job;
    ``entry``: its summary.json ``jobs.jobs[]`` entry. [] without a replay block (it did not run)."""
    from testbed.results.replay_table import replay_text

    if entry.get("replay") is None:
        return []
    return [f"job {entry['name']} (SimAI {entry['replay']['file']}): {entry['iterations']} iteration(s), "
            f"iteration {entry['iteration_s']:.3f} s, JCT {entry['jct_s']:.3f} s",
            *replay_text(entry["replay"], ctx.spec.scale_factor, ctx.spec.jobs[index].workload.simai.size_scale)]
