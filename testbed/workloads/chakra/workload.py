"""The Chakra replay (``workload.chakra``): every rank's execution trace on the agents, communication nodes
as fabric operations and compute nodes as timed waits, in dependency order (plan: testbed.workloads.chakra.plan;
run: testbed.workloads.chakra.run; docs/chakra.md)."""
from __future__ import annotations

import math
from typing import Optional

from testbed.workloads.chakra.plan import chakra_plan, replay_plan
from testbed.workloads.chakra.run import run_chakra
from testbed.workloads.plan import WorkloadPlan
from testbed.results.rundir import RunDir
from testbed.workloads.collectives import Collectives


class ChakraReplay(Collectives):
    """``workload.chakra``: chakra_nodes.csv, summary.json's ``chakra`` block and its printed table."""

    section = "chakra"
    reads_files = True

    def __init__(self, spec):
        super().__init__(spec)
        #: summary.json's ``chakra`` block and the chakra_nodes table once :meth:`run` finished
        self.block: Optional[dict] = None
        self.nodes = None

    def plan(self) -> WorkloadPlan:
        return chakra_plan(self.spec)

    def extra_s(self, plan: WorkloadPlan) -> float:
        """The compute waits of the busiest rank, s (its compute nodes run one after another)."""
        return max(plan.replay.compute_s_per_rank.values(), default=0.0)

    def scaling_keys(self) -> str:
        return ("workload.chakra.size_scale, workload.chakra.compute_scale, the traces' comm_size and "
                "duration_micros (or fabric.host_link_bps)")

    def run_ops(self, ctx, agents, rec, progress) -> None:
        """The traces' graph in dependency order (testbed.workloads.chakra.run)."""
        self.block, self.nodes = run_chakra(ctx, agents, rec, progress, replay_plan(ctx.spec, ctx.ops_plan))

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        if self.block is not None:
            RunDir(ctx.run_dir).write_table("chakra_nodes", self.nodes)
            summary["chakra"] = self.block

    def lines_after(self, ctx, summary: dict) -> list[str]:
        """One line per fabric operation (busbw), the makespan and the dependency check."""
        b = self.block
        if b is None:
            return []
        w = max([9] + [len(o["label"]) for o in b["ops"]])    # the operation column: whole labels
        lines = [f"Chakra replay of {b['path']}: {b['ranks']} ranks, {b['nodes']} nodes, {b['fabric_ops']} fabric "
                 f"ops, makespan {b['makespan_s']:.3f} s, compute x {b['compute_scale']:g}; nodes started before a "
                 f"dependency ended: {b['dependency_violations']}",
                 f"compute only W {b['compute_only_s']:.3f} s; communication C {b['comm_s']:.3f} s, exposed "
                 f"E = min(T - W, C) {b['exposed_comm_s']:.3f} s ({b['exposed_share']:.1%} of the makespan), hidden "
                 f"under compute and other groups' {b['saving']['formula_s']:.3f} s ({b['saving']['hidden_share']:.1%});"
                 f" overhead (not compute, not communication) max(0, T - W - C) {b['overhead_s']:.3f} s"
                 + (f"; skipped {b['skipped_nodes']} nodes a network replay cannot run" if b['skipped_nodes'] else ""),
                 f"{'op':>4} {'operation':<{w}} {'ranks':<10} {'size B':>9} {'time us':>10} {'busbw Mbit/s':>13}"]
        for o in b["ops"]:
            bw = o["busbw_bps"] / 1e6 if not math.isnan(o["busbw_bps"]) else math.nan
            lines.append(f"{o['op_id']:>4} {o['label']:<{w}} {','.join(map(str, o['ranks'])):<10} "
                         f"{o['size_bytes']:>9} {o['time_us']:>10.0f} {bw:>13.3f}")
        return ["\n".join(lines)]
