"""The SimAI/AICB replay (``workload.simai``): the file's fabric collectives on the agents and its timeline
of compute waits, scale-up collectives and overlap (plan: testbed.workloads.simai.plan; run: testbed.workloads.replay.run)."""
from __future__ import annotations

import time

from typing import Optional

from testbed.workloads.plan import WorkloadPlan
from testbed.workloads.replay.run import run_replay
from testbed.results.replay_table import replay_text
from testbed.workloads.simai.plan import replay_plan, simai_plan
from testbed.workloads.collectives import Collectives
from testbed.workloads.simai import job as simai_job


class SimaiReplay(Collectives):
    """``workload.simai``: the replay's timeline; summary.json's ``replay`` block and its printed tables."""

    section = "simai"
    reads_files = True

    def __init__(self, spec):
        super().__init__(spec)
        #: summary.json's ``replay`` block once :meth:`run` finished (testbed.workloads.replay.run.run_replay)
        self.replay: Optional[dict] = None

    def plan(self) -> WorkloadPlan:
        return simai_plan(self.spec)

    def extra_s(self, plan: WorkloadPlan) -> float:
        """Compute waits and scale-up collectives of every iteration, s."""
        return plan.replay.timeline_extra_s

    def scaling_keys(self) -> str:
        return "workload.simai.size_scale, workload.simai.iterations (or fabric.host_link_bps)"

    def run_ops(self, ctx, agents, rec, progress) -> None:
        """The replay's timeline (testbed.workloads.replay.run: compute waits, streams, overlap); ``reader``: how the file
        was read (world size and its source, header keys assumed, BROADCAST entries SimAI skips); ``mapping``: how
        its ranks map onto the hosts (groups on the fabric, groups that are scale-up waits)."""
        plan = replay_plan(ctx.spec, ctx.ops_plan)
        self.replay = run_replay(ctx, agents, rec, progress, plan)
        if plan.reader is not None:
            self.replay["reader"] = plan.reader
        if plan.mapping is not None:  # how the file's ranks map onto the hosts (traffic.workloads.job_mapping)
            self.replay["mapping"] = plan.mapping

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        if self.replay is not None:
            summary["replay"] = self.replay

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """The replay table (both, off then on, with ``overlap: compare``)."""
        if self.replay is None:
            return []
        return replay_text(self.replay, ctx.spec.scale_factor, ctx.spec.workload.simai.size_scale)

    def job_placed(self, index: int, job):
        return simai_job.placed(self.spec, index, job)

    def job_plan(self, index: int, job, first_stream: int, first_op: int) -> tuple:
        return simai_job.plan(self.spec, index, job, first_stream, first_op)

    def job_s(self, job, ops) -> float:
        """The job's collectives on an idle fabric plus its compute waits and scale-up collectives, s."""
        return super().job_s(job, ops) + job.replay.timeline_extra_s

    def run_job(self, ctx, agents, rec, progress, job, mine: list, record, lock, stop) -> None:
        """The job's replay (testbed.workloads.simai.job.run); its ``replay`` block kept for the results."""
        self.replay = simai_job.run(ctx, agents, rec, progress, job, record, stop, time.monotonic(), time.monotonic)

    def job_results(self, job) -> dict:
        return {"replays": {job.name: self.replay}} if self.replay is not None else {}

    def job_lines(self, ctx, index: int, entry: dict) -> list[str]:
        return simai_job.replay_lines(ctx, index, entry)
