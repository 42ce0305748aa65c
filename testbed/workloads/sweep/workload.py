"""The size sweep (``workload.sizes``): warm-up and timed iterations of one collective per size, as
nccl-tests runs them, over all hosts or hosts 0..``workload.ranks``-1."""
from __future__ import annotations

import time

from testbed.process import signals
from testbed.workloads.plan import PlannedOp, WorkloadPlan, sweep_plan
from testbed.workloads.collectives import Collectives
from testbed.workloads.sweep import job as sweep_job


class SizeSweep(Collectives):
    """``workload.sizes``: every collective of the plan in order, each a barrier over its groups."""

    section = "sizes"

    def plan(self) -> WorkloadPlan:
        return sweep_plan(self.spec)

    def scaling_keys(self) -> str:
        return ("workload.sizes.max_bytes, workload.iterations, workload.max_bytes_per_size "
                "(or fabric.host_link_bps)")

    def check_machine(self) -> None:
        """Refuse an ``output.nccl.json_path`` (``-J``) whose directory is missing or not writable before anything
        is built, not after the run (testbed.results.rundir.check_output_file; relative: to the current
        directory). Raises ScenarioError naming the key, the path and the reason."""
        if self.spec.output.nccl.json_path:
            from testbed.results.rundir import check_output_file
            check_output_file(self.spec.output.nccl.json_path, "output.nccl.json_path (-J)")

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """nccl-tests' JSON when ``output.nccl.json_path`` is set (testbed.results.nccl_table; ``-J``): its path
        in summary.json ``nccl_json``."""
        if ctx.spec.output.nccl.json_path:
            from testbed.results.nccl_table import write_run_json
            summary["nccl_json"] = str(write_run_json(ctx))

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """nccl-tests' ``# Writing JSON output to FILE`` when the JSON was written."""
        return [f"# Writing JSON output to {summary['nccl_json']}"] if summary.get("nccl_json") else []

    def run_ops(self, ctx, agents, rec, progress) -> None:
        """Every collective of the plan in order, each a barrier; signals are held back after the last one;
        a progress line per op (the size's busbw when its last iteration is done)."""
        ops_plan: tuple[PlannedOp, ...] = ctx.ops_plan
        for k, op in enumerate(ops_plan):
            size, factor = op.size_bytes, op.busbw_factor
            expect_s = factor * size * 8 / ctx.goodput_bps
            recs = agents.run_op(k, size, op.groups, timeout_s=10 * expect_s + 20,
                                 collective=op.collective, algorithm=op.algorithm)
            rec.rank_rows.extend(recs)
            rec.op_meta[k] = op.meta()
            if k + 1 == len(ops_plan):  # every collective is done: finish measuring, then stop
                signals.defer()
                rec.phase = "the final measurements"
            t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
            last = k + 1 == len(ops_plan) or ops_plan[k + 1].size_bytes != size
            progress.op(k + 1, size, size * 8 / (t_us / 1e6) * factor, last)

    def job_placed(self, index: int, job):
        return sweep_job.placed(self.spec, index, job)

    def job_plan(self, index: int, job, first_stream: int, first_op: int) -> tuple:
        return sweep_job.plan(self.spec, index, job, first_stream, first_op)

    def run_job(self, ctx, agents, rec, progress, job, mine: list, record, lock, stop) -> None:
        """The job's ops FIFO on its stream (testbed.workloads.sweep.job.run)."""
        sweep_job.run(ctx, agents, job, mine, record, stop, time.monotonic(), time.monotonic)
