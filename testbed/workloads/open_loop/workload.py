"""Open-loop flows (``workload.open_loop``): Poisson arrivals at a load, sizes from a flow-size CDF, FCT slowdown
by size (testbed.workloads.open_loop: cdf, arrivals, standalone, plan, driver)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from testbed.process import signals
from testbed.spec import estimate
from testbed.workloads.base import Workload
from testbed.workloads.open_loop.driver import OpenLoopRun, format_open_loop, write_open_loop_results
from testbed.workloads.open_loop.plan import RUN_OVERHEAD_S, OpenLoopPlan, plan_open_loop
from testbed.workloads.plan import PlannedOp, WorkloadPlan


class OpenLoopFlows(Workload):
    """``workload.open_loop``: no collectives (an empty op plan); the run starts its own agents."""

    section = "open_loop"
    reads_files = True

    def __init__(self, spec):
        super().__init__(spec)
        self._plan: Optional[OpenLoopPlan] = None
        #: the flows on the running fabric, made by :meth:`session`
        self.flows_run: Optional[OpenLoopRun] = None

    def open_loop_plan(self) -> OpenLoopPlan:
        """The flows on the fabric's layout (testbed.workloads.open_loop.plan), drawn once per instance."""
        if self._plan is None:
            self._plan = plan_open_loop(self.spec, self.spec.fabric.layout_preview())
        return self._plan

    def plan(self) -> WorkloadPlan:
        p = self.open_loop_plan()
        o = self.spec.workload.open_loop
        note = (f"open loop: {len(p.flows)} flows of {o.cdf} x {o.size_scale:g} (mean "
                f"{p.cdf.mean_bytes * o.size_scale:,.0f} B) at load {o.load:g}: one every "
                f"{p.mean_interarrival_s * 1e3:.1f} ms per host, seed {p.seed}")
        return WorkloadPlan((), (note,))

    def estimate_s(self, ops: tuple[PlannedOp, ...]) -> float:
        """Set-up, the flows' ideal span (each alone) and the agents' start (RUN_OVERHEAD_S), s."""
        return estimate.setup_s(self.spec.fabric) + self.open_loop_plan().ideal_span_s + RUN_OVERHEAD_S

    def operations(self, ops: tuple[PlannedOp, ...]) -> tuple[int, str]:
        n = len(self.open_loop_plan().flows)
        return n, f"{n} open-loop flows"

    def scaling_keys(self) -> str:
        return ("workload.open_loop.duration_s or flows, workload.open_loop.size_scale (or fabric.host_link_bps, "
                "workload.open_loop.load)")

    def fan_in(self, ops: tuple[PlannedOp, ...]) -> int:
        """Every other host may send to one host at once."""
        return max(1, len(self.spec.fabric.layout_preview().hosts) - 1)

    def peers(self, ops: tuple[PlannedOp, ...]) -> dict[int, list[int]]:
        """Every host with every other (any pair may draw a flow)."""
        n = len(self.spec.fabric.layout_preview().hosts)
        return {r: [q for q in range(n) if q != r] for r in range(n)}

    @contextmanager
    def session(self, ctx, fab) -> Iterator[None]:
        """The plan on ``fab``; no agents yet (:meth:`run` starts them with a QP per lane)."""
        self.flows_run = OpenLoopRun(ctx, fab, self.open_loop_plan())
        yield None

    def run(self, ctx, agents, rec, progress) -> None:
        """Every flow (testbed.workloads.open_loop.driver.OpenLoopRun.run); signals held back after the last."""
        self.flows_run.run(rec, progress)
        signals.defer()

    def cpu_while_traffic(self, cpu):
        """Judge the CPU while flows ran, not while the agents started."""
        return cpu if self.flows_run is None else self.flows_run.during_traffic(cpu)

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """fct.csv, slowdown.csv and summary.json's ``open_loop`` (testbed.workloads.open_loop.driver)."""
        summary["open_loop"] = write_open_loop_results(ctx, self.flows_run)

    def lines_after(self, ctx, summary: dict) -> list[str]:
        return format_open_loop(summary["open_loop"])
