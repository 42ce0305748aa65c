"""A size sweep as one job of a ``jobs`` list (``jobs[].workload.sizes``): its collectives over the job's
ranks, repeated for the job's passes (warm-ups in the first pass only), FIFO on its one stream.

Plan: the sweep's ops (testbed.workloads.plan.sweep_ops) over the job's ranks (the global ranks of its hosts,
in placement order), each tagged with the job's name, stream and group; passes: the job's ``iterations``,
or with ``duration_s`` enough passes of one pass's estimate on an idle fabric to fill it. Run: each op
submitted when the previous one finished (testbed.emulation.agents.AgentGroup.submit); with ``duration_s``
no pass starts once that many seconds passed since the job's start.
"""
from __future__ import annotations

from dataclasses import replace

from testbed.emulation.agents import taking_part
from testbed.workloads.plan import PlannedOp, list_places, pass_estimate_s, sweep_ops
from traffic.transport.qp import class_tos


def placed(spec, index: int, job):
    """``job`` (testbed.workloads.jobs.plan.PlacedJob) with its passes: the job's, or with duration_s enough
    passes of one pass's estimate (testbed.workloads.plan.pass_estimate_s, without warm-ups) to fill it."""
    one, _ = sweep_ops(spec.jobs[index].workload, job.ranks, warmup=False)
    return replace(job, passes=spec.jobs[index].passes(pass_estimate_s(spec, one)), workload="sizes")


def plan(spec, index: int, job, first_stream: int, first_op: int):
    """(the job on stream ``first_stream`` from op ``first_op``, its ops pass after pass, its notes)."""
    js = spec.jobs[index]
    job = replace(job, stream=first_stream, first_op=first_op)
    ops: list[PlannedOp] = []
    cut_all = []
    for p in range(job.passes):
        pass_ops, cut = sweep_ops(js.workload, job.ranks, warmup=p == 0)
        cut_all = cut_all or cut
        ops.extend(replace(op, job=job.name, stream=job.stream, group=job.name,
                           iteration=op.iteration + (0 if op.warmup else p * js.workload.iterations))
                   for op in pass_ops)
    notes = [f"job {job.name} (tenant {job.tenant}): {len(job.hosts)} ranks on {', '.join(job.hosts)} "
             f"({job.placement}), starts at {job.start_s:g} s, {job.passes} pass(es), traffic class "
             f"{job.traffic_class} (DSCP {class_tos(job.traffic_class) >> 2})"
             + (f", stops starting passes after {job.duration_s:g} s" if job.duration_s else "")]
    if cut_all:
        notes.append(f"jobs.{index}.workload.max_bytes_per_size = {js.workload.max_bytes_per_size} B cuts "
                     f"the larger sizes' iterations (size: iterations run): {list_places(cut_all)}")
    return job, ops, notes


def pass_starts(ops: list[PlannedOp], passes: int) -> set[int]:
    """Indices in one job's ops (:func:`plan` order: warm-ups in pass 0 only) where passes 1.. start."""
    timed = sum(1 for op in ops if not op.warmup) // max(passes, 1)
    first = len(ops) - timed * (passes - 1)
    return {first + p * timed for p in range(passes - 1)}


def run(ctx, agents, job, mine, record, stop, started: float, now) -> None:
    """The job's ops ``mine`` ((op id, PlannedOp) in order) one after the other on its stream; ``record(k, op,
    recs, last)`` after each; stops when ``stop`` is set or, with duration_s, at a pass start once that many
    seconds passed since ``started`` (``now()``: monotonic seconds). Raises what the agents raise."""
    starts = pass_starts([op for _, op in mine], job.passes)
    for n, (k, op) in enumerate(mine):
        if stop.is_set():
            return
        if job.duration_s is not None and n in starts and now() - started >= job.duration_s:
            return
        expect_s = op.busbw_factor * op.size_bytes * 8 / ctx.goodput_bps
        timeout_s = 10 * expect_s + 20
        fut = agents.submit(k, op.size_bytes, op.groups, timeout_s=timeout_s, collective=op.collective,
                            algorithm=op.algorithm, stream=op.stream)
        recs = taking_part(agents.wait(fut, k, timeout_s + 10), op.groups)
        record(k, op, recs, n + 1 == len(mine) or mine[n + 1][1].size_bytes != op.size_bytes)
