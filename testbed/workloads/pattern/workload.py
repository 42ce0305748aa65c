"""The pattern trials (``workload.pattern``): flows between hosts, fresh agents per trial (testbed.workloads.pattern:
plan, driver, ideal, results)."""
from __future__ import annotations

import time

from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.process import signals
from testbed.workloads.pattern.driver import PatternRun
from testbed.workloads.pattern import job as pattern_job
from testbed.workloads.pattern.plan import (check_pattern_peers, estimate_s as trials_s, flows_fan_in, pattern_flows,
                                           pattern_peers)
from testbed.workloads.pattern.results import format_load_balance, write_pattern_results
from testbed.workloads.plan import PlannedOp, WorkloadPlan
from testbed.spec import estimate
from testbed.workloads.base import Workload


class PatternTrials(Workload):
    """``workload.pattern``: no collectives (an empty op plan); the trials start their own agents."""

    section = "pattern"

    def __init__(self, spec):
        super().__init__(spec)
        #: the trials on the running fabric (testbed.workloads.pattern.driver.PatternRun), made by :meth:`session`
        self.trials: Optional[PatternRun] = None

    def plan(self) -> WorkloadPlan:
        return WorkloadPlan((), ())

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up plus the trials of the pattern's ideal completion time (testbed.workloads.pattern.plan.estimate_s)."""
        return estimate.setup_s(self.spec.fabric) + trials_s(self.spec)

    def operations(self, ops: tuple[PlannedOp, ...]) -> tuple[int, str]:
        """Every flow of every trial: (trials x flows, ``T trials x F flows``)."""
        n_flows = len(pattern_flows(self.spec, self.spec.fabric.layout_preview()))
        trials = self.spec.workload.pattern.trials
        return trials * n_flows, f"{trials} trial{'s' if trials != 1 else ''} x {n_flows} flows"

    def scaling_keys(self) -> str:
        return "workload.pattern.size_bytes, workload.pattern.trials (or fabric.host_link_bps)"

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        """Queue pairs sending to one receiver (a flow of ``qps`` N counts N: each QP has its own window in
        flight); per-QP ECMP can put 2 of them on one uplink when flows cross leaves."""
        spec = self.spec
        flows = pattern_flows(spec, spec.fabric.layout_preview())
        fan = flows_fan_in(flows)
        hashed = spec.transport.entropy != "spray" and spec.fabric.leaves > 1 and sum(f.qps for f in flows) > 1
        return max(fan, 2 if hashed else 1)

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """The other end of each rank's flows (testbed.workloads.pattern.plan.check_pattern_peers)."""
        return check_pattern_peers(self.spec, self.spec.fabric.layout_preview())

    @contextmanager
    def session(self, ctx, fab) -> Iterator[None]:
        """The pattern's flows on ``fab``'s layout; no agents (each trial starts its own)."""
        self.trials = PatternRun(ctx, fab)
        yield None

    def run(self, ctx, agents, rec, progress) -> None:
        """Every trial (testbed.workloads.pattern.driver.PatternRun.run); signals held back after the last."""
        self.trials.run(rec, progress)
        signals.defer()

    def cpu_while_traffic(self, cpu):
        """Judge the CPU while flows ran, not while agents restarted between trials."""
        return cpu if self.trials is None else self.trials.during_traffic(cpu)

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """fct.csv, flow_rates.csv, uplinks.csv and summary.json's ``load_balance`` (testbed.workloads.pattern.results);
        with the congestion loop on, its flow figures (fairness, bottleneck, CNPs, victim dip)."""
        summary["load_balance"] = write_pattern_results(ctx, self.trials, qps, ports, faults)
        if summary["congestion"] is not None:
            from testbed.results.congestion_flows import flow_figures
            from testbed.spec.transport import cc_class, cc_settings
            cnp_ns = cc_class(ctx.spec).cnp_interval_ns(cc_settings(ctx.spec))
            summary["congestion"].update(flow_figures(ctx.run_dir, cnp_ns / 1000 if cnp_ns is not None else None))

    def lines_before(self, ctx, summary: dict) -> list[str]:
        return [format_load_balance(summary["load_balance"])]

    def job_placed(self, index: int, job):
        return pattern_job.placed(self.spec, index, job)

    def job_plan(self, index: int, job, first_stream: int, first_op: int) -> tuple:
        return pattern_job.plan(self.spec, index, job, first_stream, first_op)

    def job_s(self, job, ops) -> float:
        """The job's passes, each its flows' ideal span plus the lead of its command
        (testbed.workloads.pattern.job.pass_s), s."""
        return job.passes * pattern_job.pass_s(self.spec, list(job.flows))

    def job_peers(self, job) -> dict[int, list[int]]:
        """The other end of each of the job's flows."""
        return pattern_peers(list(job.flows))

    def job_fan_in(self, job) -> int:
        """The job's queue pairs into one receiver (testbed.workloads.pattern.plan.flows_fan_in)."""
        return flows_fan_in(list(job.flows))

    def job_session(self, ctx, fab, index: int, job) -> None:
        """The job's flows on ``fab`` (testbed.workloads.pattern.driver.PatternRun), in :attr:`trials`."""
        self.trials = PatternRun(ctx, fab, ctx.spec.jobs[index].workload.pattern, list(job.flows))

    def run_job(self, ctx, agents, rec, progress, job, mine: list, record, lock, stop) -> None:
        """The job's passes on its stream (testbed.workloads.pattern.job.run)."""
        pattern_job.run(ctx, agents, progress, job, self.trials, lock, stop, time.monotonic)

    def job_results(self, job) -> dict:
        """The job's figures over its finished passes (testbed.workloads.pattern.job.figures)."""
        return {"patterns": {job.name: pattern_job.figures(self.trials)}}

    def job_tables(self, job, qps) -> dict:
        """fct.csv rows of the job's passes (testbed.workloads.pattern.job.fct_rows)."""
        return {"fct": pattern_job.fct_rows({job.name: self.trials}, qps)}
