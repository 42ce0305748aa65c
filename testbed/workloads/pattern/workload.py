"""The pattern trials (``workload.pattern``): flows between hosts, fresh agents per trial (testbed.workloads.pattern:
plan, driver, ideal, results)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.process import signals
from testbed.workloads.pattern.driver import PatternRun
from testbed.workloads.pattern.plan import check_pattern_peers, estimate_s as trials_s, flows_fan_in, pattern_flows
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
